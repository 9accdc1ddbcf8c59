package runtime

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
)

// t_publisher counts its events (n/total) and, as a Publisher, counts its
// publishes (n/published), noting in ownStepDone that a publish step is
// about to commit; as a Ticker it counts its ticks (n/ticks) the same way.
type publisher struct{}

var ownStepDone atomic.Bool

func (publisher) Process(ctx flowlet.Context, ev flowlet.Event) error {
	return ctx.Counters("n").Add([]byte("total"), 1)
}

func (publisher) Publish(ctx flowlet.Context) error {
	ownStepDone.Store(true)
	return ctx.Counters("n").Add([]byte("published"), 1)
}

type ticker struct{ publisher }

func (ticker) Publish(ctx flowlet.Context) error { return nil }

func (ticker) Tick(ctx flowlet.Context) error {
	ownStepDone.Store(true)
	return ctx.Counters("n").Add([]byte("ticks"), 1)
}

func init() {
	flowlet.Register("t_publisher", func() flowlet.Flowlet { return publisher{} }, flowlet.TypeInfo{Sink: true})
	flowlet.Register("t_own_ticker", func() flowlet.Flowlet { return ticker{} }, flowlet.TypeInfo{Sink: true})
}

// TestOwnStepCommitFailure: a publish or a tick whose step cannot commit
// after its retries (a step timeout, a step too large) is handled as one
// whose call failed. A publish's stops the app — the sink's output would
// silently fall behind otherwise — and a tick's is recorded in the DLQ
// (input "tick"). Both were retried and then taken as done: the drain
// ended with nothing published and no error, the tick left no trace.
func TestOwnStepCommitFailure(t *testing.T) {
	for typ, tick := range map[string]string{"t_publisher": "", "t_own_ticker": "tick: 1h, "} {
		t.Run(typ, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			a := openYAML(t, `
app: ownfail
flowlets:
  gen: {type: generator, config: {count: 3}}
  sink: {type: `+typ+`, `+tick+`retries: {max: 1, backoff: 1ms}}
connections:
  - {from: gen, to: sink}
`, Options{NoSync: true, Drain: true, DataDir: dir})
			ownStepDone.Store(false)
			a.commitFault = func(sc *stepCtx) error {
				if sc.in.fl.Name == "sink" && ownStepDone.Swap(false) {
					return errors.New("commit refused (test)")
				}
				return nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang detector
			defer cancel()
			err := a.Run(ctx)
			if ctx.Err() != nil {
				t.Fatalf("the app neither drained nor stopped: %+v", a.Status())
			}
			if typ == "t_publisher" {
				if err == nil || !strings.Contains(err.Error(), "publish failed after 2 attempts: commit refused (test)") {
					t.Fatalf("run: %v, want the publish's failure", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			a.Close()
			s, err := OpenStore(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var dead []DeadLetter
			if err := s.DeadLetters("sink", 0, func(d DeadLetter) bool { dead = append(dead, d); return true }); err != nil {
				t.Fatal(err)
			}
			if len(dead) != 1 || dead[0].Input != "tick" || dead[0].Attempts != 2 || !strings.Contains(dead[0].Error, "commit refused (test)") {
				t.Fatalf("dead letters %+v, want the tick's, after 2 attempts", dead)
			}
		})
	}
}
