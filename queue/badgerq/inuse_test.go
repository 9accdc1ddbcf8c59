package badgerq

import (
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// A consumer handed a transaction by a second Context while the first
// one's is in progress refuses it with queue.ErrInUse, and the refused
// Context's abort leaves the first transaction alone: it goes on and
// commits what it read. Before, the second start released the first's
// leases and took its place, and the first went on in the second's
// transaction.
func TestConsumerInTwoContexts(t *testing.T) {
	withStartedConsumer(t, func(t *testing.T, e *queuetest.Env, c queue.Consumer, first *tx.Context, _ *tx.Tx) {
		must := mustT(t)
		got, err := c.Dequeue(1)
		must(err)
		if _, err := e.Coord.NewContext(c).Start(time.Minute); !errors.Is(err, queue.ErrInUse) {
			t.Fatalf("a second Context's Start returned %v, want ErrInUse", err)
		}
		more, err := c.Dequeue(10)
		must(err)
		must(first.Finish())
		got = append(got, more...)
		got = append(got, queuetest.Drain(t, e, c, 10)...)
		expectPayloadsOnce(t, got, "a", "b", "c")
	})
}

// withStartedConsumer runs fn on the fast and on the general path, with
// queue q (FIFO group g, one instance) holding a, b and c, its consumer,
// and a Context over it whose transaction t0 started.
func withStartedConsumer(t *testing.T, fn func(t *testing.T, e *queuetest.Env, c queue.Consumer, ctx *tx.Context, t0 *tx.Tx)) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "general"}[fast], func(t *testing.T) {
			e := newEnv(t, fast)
			fifoQueue(t, e.Queues, e.Coord, 1)("a", "b", "c")
			c, _ := e.Queues.Consumer("q", "g", 0)
			ctx := e.Coord.NewContext(c)
			t0, err := ctx.Start(time.Minute)
			mustT(t)(err)
			fn(t, e, c, ctx, t0)
		})
	}
}

// A Context given up after its transaction timed out finishes late, after
// its consumer went on in a new Context: its Stage (fast path) or nothing
// (general path), then the Rollback of its failed commit, reach the
// consumer's new transaction, which the Rollback ends. The new Context's
// commit then went through without the consumer's cursor moves (Stage and
// Persist without a transaction wrote nothing and returned nil), and the
// entries it had delivered came again. Its Finish fails now (ErrNoTx).
func TestLateFinishOfGivenUpContext(t *testing.T) {
	withStartedConsumer(t, func(t *testing.T, e *queuetest.Env, c queue.Consumer, givenUp *tx.Context, t1 *tx.Tx) {
		must := mustT(t)
		if got, err := c.Dequeue(10); err != nil || len(got) != 3 {
			t.Fatalf("got %d entries (%v), want 3", len(got), err)
		}
		must(e.Coord.Invalidate(t1)) // timed out
		next := e.Coord.NewContext(c)
		_, err := next.Start(time.Minute)
		must(err)
		got, err := c.Dequeue(10)
		must(err)
		if err := givenUp.Finish(); !errors.Is(err, tx.ErrNotInProgress) {
			t.Fatalf("the given-up Context's late Finish returned %v, want ErrNotInProgress", err)
		}
		if err := next.Finish(); err != nil {
			if !errors.Is(err, queue.ErrNoTx) {
				t.Fatalf("the new Context's Finish returned %v, want nil or ErrNoTx", err)
			}
			got = nil // not committed
		}
		expectPayloadsOnce(t, append(got, queuetest.Drain(t, e, c, 10)...), "a", "b", "c")
	})
}

// expectPayloadsOnce checks that es holds each of want once, and nothing else.
func expectPayloadsOnce(t *testing.T, es []queue.Entry, want ...string) {
	t.Helper()
	n := map[string]int{}
	for _, en := range es {
		n[string(en.Payload)]++
	}
	if len(n) != len(want) {
		t.Fatalf("got %v, want each of %v once", n, want)
	}
	for _, w := range want {
		if n[w] != 1 {
			t.Fatalf("%s delivered %d times (%v)", w, n[w], n)
		}
	}
}

// The PostCommit of a Context given up after its commit (it never came)
// comes late, after the consumer went on in a new Context that read the
// rest and then aborts: it published the new transaction's reads as
// committed, and they never came again. A PostCommit is the consumer's
// transaction's only after its Stage or Persist.
func TestLatePostCommitOfGivenUpContext(t *testing.T) {
	withStartedConsumer(t, func(t *testing.T, e *queuetest.Env, c queue.Consumer, ctx *tx.Context, _ *tx.Tx) {
		must := mustT(t)
		must(ctx.Abort(nil)) // not this one: a Context whose PostCommit never reaches c
		givenUp := e.Coord.NewContext(queuetest.WithoutPostCommit(c))
		_, err := givenUp.Start(time.Minute)
		must(err)
		got, err := c.Dequeue(1)
		must(err)
		must(givenUp.Finish())
		next := e.Coord.NewContext(c)
		_, err = next.Start(time.Minute)
		must(err)
		if rest, err := c.Dequeue(10); err != nil || len(rest) != 2 {
			t.Fatalf("the new transaction got %d entries (%v), want 2", len(rest), err)
		}
		c.PostCommit() // the given-up Context's, late
		must(next.Abort(nil))
		expectPayloadsOnce(t, append(got, queuetest.Drain(t, e, c, 10)...), "a", "b", "c")
	})
}
