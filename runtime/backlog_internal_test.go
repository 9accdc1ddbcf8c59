package runtime

import (
	"context"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
)

// t_take counts its events (counter n/ok).
type takeAll struct{}

func (takeAll) Process(ctx flowlet.Context, ev flowlet.Event) error {
	return ctx.Counters("n").Add([]byte("ok"), 1)
}

func init() {
	flowlet.Register("t_take", func() flowlet.Flowlet { return takeAll{} }, flowlet.TypeInfo{Sink: true})
}

// TestSyncBacklogsBetweenCommitAndCount runs a sync of the backlog counts
// (what a throttled source does every second) right after a consumer's
// commit, before the runtime counted the events it consumed: the sync read
// them as consumed in the store, and the count then took them off again,
// leaving the count under the real backlog (a source could pass its
// max_backlog by as much). The sync now waits for the count; after the
// drain the counts match the store's lags (0).
func TestSyncBacklogsBetweenCommitAndCount(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.yaml")
	yaml := `
app: sync
flowlets:
  gen: {type: generator, config: {count: 200, batch: 20, max_backlog: 0}}
  sink: {type: t_take, batch_size: 7}
connections:
  - {from: gen, to: sink}
`
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Open(p, Options{DataDir: filepath.Join(dir, "data"), NoSync: true, Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var hooked atomic.Bool
	syncErr := make(chan error, 1)
	a.afterCommit = func(in *instance) {
		if in.fl.Name != "sink" || in.inputs[0].taken == 0 || hooked.Swap(true) {
			return
		}
		synced := make(chan struct{})
		go func() {
			syncErr <- a.syncBacklogs()
			close(synced)
		}()
		// Go on once the sync is done (it did not wait for this commit's
		// count) or waits for the lock this commit holds (a pending
		// writer makes TryRLock fail).
		for {
			select {
			case <-synced:
				return
			default:
			}
			if !a.backlogMu.TryRLock() {
				return
			}
			a.backlogMu.RUnlock()
			goruntime.Gosched()
		}
	}
	// A hang detector, not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("not drained: %+v", a.Status())
	}
	if !hooked.Load() {
		t.Fatal("the sink never committed a step")
	}
	if err := <-syncErr; err != nil {
		t.Fatal(err)
	}
	infos, err := a.st.queues.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range infos {
		for _, g := range q.Groups {
			if c := a.backlog[q.Name][g.Name]; c != nil && c.Load() != g.Lag {
				t.Errorf("queue %s group %s: backlog counted %d, the store's lag is %d", q.Name, g.Name, c.Load(), g.Lag)
			}
		}
	}
}
