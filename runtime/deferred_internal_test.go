package runtime

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/planner"
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
	in := &instance{a: &App{}, stop: make(chan struct{}), logger: slog.New(slog.DiscardHandler)}
	in.pending = deferredCommits(t, func(l *tx.BadgerLog) tx.Log { return l }, 3)
	in.retryWait(context.Background(), time.Millisecond)
	if n := len(in.pending); n != 0 {
		t.Fatalf("%d deferred commits still pending after a retry wait", n)
	}
}

// deferredCommits makes n deferred commits on a store of their own, its
// log made by wrap, and returns them (the store closes with the test).
func deferredCommits(t *testing.T, wrap func(*tx.BadgerLog) tx.Log, n int) []tx.Pending {
	t.Helper()
	// SyncHooks: deferred commits get tickets (not synced at once).
	db, err := badger.Open(tx.SyncHooks(badger.DefaultOptions(t.TempDir()).WithLogger(nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	l, err := tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tx.Open(tx.Options{Log: wrap(l)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var ps []tx.Pending
	for range n {
		txn, err := c.StartShort(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.CommitWithDeferred(txn, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// failingSyncLog is a BadgerLog whose deferred commits never become
// durable: Durable fails, as a sync of the store that failed (EIO) does.
type failingSyncLog struct{ *tx.BadgerLog }

var errSyncFailed = errors.New("sync failed (test)")

func (failingSyncLog) Durable(uint64) error { return errSyncFailed }

// An instance whose deferred commits fail to become durable as it settles
// before a wait (a pause, back-pressure, a retry's backoff) stops the app
// with the error. It was only logged: an app stopped then, with no step
// after it to meet the failed store, ended Run with nil (exit 0) though
// its last commits may not be on disk.
func TestSettleBeforeWaitFailureStopsApp(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	a := &App{fatal: make(chan error, 1), runCtx: ctx, runStop: stop}
	in := &instance{a: a, fl: &planner.Flowlet{Name: "f"}, stop: make(chan struct{}), logger: slog.New(slog.DiscardHandler)}
	in.pending = deferredCommits(t, func(l *tx.BadgerLog) tx.Log { return failingSyncLog{l} }, 1)
	in.settleBeforeWait()
	select {
	case err := <-a.fatal:
		if !errors.Is(err, errSyncFailed) && !errors.Is(err, tx.ErrLogFailed) {
			t.Errorf("the app stops with %v, want the failed sync", err)
		}
	default:
		t.Fatal("a failed sync of deferred commits does not stop the app")
	}
	if ctx.Err() == nil {
		t.Error("the run goes on after a failed sync of deferred commits")
	}
}
