package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/testgate"
)

// t_fails_on_0 is a batch flowlet that fails every call on instance 0 (a
// single-event call after passing isolateGate) and counts its events
// (n/total) on any other instance.
type failsOn0 struct{ instance int }

var isolateGate testgate.Gate

func (f *failsOn0) Init(ic flowlet.InitContext) error { f.instance = ic.Instance; return nil }

func (f *failsOn0) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	if f.instance == 0 {
		if len(evs) == 1 {
			isolateGate.Pass()
		}
		return errors.New("instance 0 fails")
	}
	return ctx.Counters("n").Add([]byte("total"), int64(len(evs)))
}

func init() {
	flowlet.Register("t_fails_on_0", func() flowlet.Flowlet { return &failsOn0{} }, flowlet.TypeInfo{Sink: true})
}

// failureEntries counts the flowlet's per-event failure bookkeeping: what
// its instances keep of failed attempts, failed batches and isolation
// (failureLog).
func (a *App) failureEntries(flowletName string) int {
	frt := a.byName[flowletName]
	frt.fails.mu.Lock()
	defer frt.fails.mu.Unlock()
	return len(frt.fails.m)
}

// TestIsolationForgottenWhenCommittedElsewhere: a batch that failed on
// instance 0 is processed event by event there (isolation); when its
// partition moves to instance 1 (a scale-up) and instance 1 commits the
// events, nothing of their failures may stay behind. Instance 0 kept its
// isolation entries for good: a leak under rescaling.
func TestIsolationForgottenWhenCommittedElsewhere(t *testing.T) {
	// A key of partition 1, which the scale to 2 instances moves to
	// instance 1 (partition p goes to instance p % n).
	key := ""
	for i := 0; ; i++ {
		if key = fmt.Sprintf("k%d", i); xxhash.Sum64String(key)%2 == 1 {
			break
		}
	}
	a := openYAML(t, `
app: iso
flowlets:
  gen: {type: generator, config: {count: 4, batch: 4, payload: "e{seq}", keys: {k: "`+key+`"}}}
  b: {type: t_fails_on_0, batch_size: 16, retries: {max: 3, backoff: 1ms, max_backoff: 1ms}}
connections:
  - {from: gen, to: b, strategy: hash, key: k, partitions: 2}
`, Options{NoSync: true})
	entered, open := isolateGate.Hold(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	<-entered // instance 0 isolates the batch, holding its partition
	if _, err := a.Scale(ctx, "b", 2); err != nil {
		t.Fatal(err)
	}
	// Instance 0's events fail and wait for a retry; instance 1 takes them.
	open()
	deadline := time.Now().Add(time.Minute) // a hang detector
	for {
		var n int64
		if err := a.View("b", func(r StateReader) error {
			var err error
			n, err = r.Counters("n").Get([]byte("total"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance 1 did not commit the 4 events: %d; %+v", n, a.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	done <- nil
	if n := a.failureEntries("b"); n != 0 {
		t.Errorf("%d failure entries left of events instance 1 committed, want 0", n)
	}
}
