package runtime

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/tx"
)

type observerFlowlet struct{}

func (observerFlowlet) Committed() {}
func (observerFlowlet) Aborted()   {}

type publisherFlowlet struct{}

func (publisherFlowlet) Publish(flowlet.Context) error { return nil }

// Only an instance of an app that asks for it (Options.DeferCommits) and
// whose commits nobody outside the store hears of commits deferred: the HTTP source answers its clients (a StepObserver) and sinks
// publish (a Publisher) only after a durable commit.
func TestCanDeferOnlyWithoutOutsideEffects(t *testing.T) {
	on := &App{opts: Options{DeferCommits: true}}
	for _, c := range []struct {
		name string
		in   *instance
		want bool
	}{
		{"plain", &instance{a: on}, true},
		{"not asked for", &instance{a: &App{}}, false},
		{"observer", &instance{a: on, obs: observerFlowlet{}}, false},
		{"publisher", &instance{a: on, pub: publisherFlowlet{}}, false},
	} {
		if got := c.in.canDefer(); got != c.want {
			t.Errorf("%s: canDefer = %v, want %v", c.name, got, c.want)
		}
	}
}

// An instance that backs off before a retry first makes its deferred
// commits durable: they must not wait for its next step.
func TestRetryWaitSettlesDeferredCommits(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions(t.TempDir()).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, err := tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tx.Open(tx.Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in := &instance{a: &App{}, stop: make(chan struct{}), logger: slog.New(slog.DiscardHandler)}
	for range 3 {
		txn, err := c.StartShort(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.CommitWithDeferred(txn, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		in.pending = append(in.pending, p)
	}
	in.retryWait(context.Background(), time.Millisecond)
	if n := len(in.pending); n != 0 {
		t.Fatalf("%d deferred commits still pending after a retry wait", n)
	}
}
