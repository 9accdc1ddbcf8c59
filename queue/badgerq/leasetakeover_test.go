package badgerq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// fifoQueue creates queue q (one partition) with FIFO group g of instances
// instances, and returns a function that commits an event of each payload.
func fifoQueue(t *testing.T, qs *queue.Queues, coord *tx.Coordinator, instances int) (enqueue func(payloads ...string)) {
	return fifoQueueConfig(t, qs, coord, queue.Config{Partitions: 1}, instances)
}

// fifoQueueConfig is fifoQueue with queue configuration cfg.
func fifoQueueConfig(t *testing.T, qs *queue.Queues, coord *tx.Coordinator, cfg queue.Config, instances int) (enqueue func(payloads ...string)) {
	must := mustT(t)
	must(qs.CreateQueue("q", cfg))
	must(qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: instances}))
	p, _ := qs.Producer("q")
	return func(payloads ...string) {
		must(queuetest.Step(coord, func() error {
			for _, s := range payloads {
				if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte(s)}); err != nil {
					return err
				}
			}
			return nil
		}, p))
	}
}

// General path: a consumer transaction passed CanCommit, then timed out
// before its Persist, and a FIFO peer took its partition over and committed
// the entries. The late Persist wrote its state over the peer's, and its
// Rollback the state before both: after a restart the peer's entries came
// again. A Persist whose partition was taken over is refused.
func TestTakenOverLeaseRefusesPersist(t *testing.T) { lateConsumerTakenOver(t, false) }

// lateConsumerTakenOver: a general-path consumer transaction passes
// CanCommit (and, persisted, its Persist) and times out; a FIFO peer takes
// its partition over and commits its 3 entries; the late transaction's
// Persist (unless persisted), commit and Rollback change nothing: after a
// restart nothing comes again.
func lateConsumerTakenOver(t *testing.T, persisted bool) {
	var moved atomic.Int64
	n := newGeneralNodeClock(t, func() time.Time { return time.Now().Add(time.Duration(moved.Load())) })
	must := mustT(t)
	fifoQueue(t, n.qs, n.coord, 2)("a", "b", "c")

	late, _ := n.qs.Consumer("q", "g", 0)
	t1, err := n.coord.StartShort(time.Minute)
	must(err)
	must(late.StartTx(t1))
	if got, err := late.Dequeue(10); err != nil || len(got) != 3 {
		t.Fatalf("late consumer got %d entries (%v), want 3", len(got), err)
	}
	must(n.coord.CanCommit(t1, nil))
	if persisted {
		must(late.Persist())
	}
	moved.Add(int64(2 * time.Minute))
	if n.coord.ExpireTimedOut() != 1 {
		t.Fatal("the late consumer's transaction did not time out")
	}

	peer, _ := n.qs.Consumer("q", "g", 1)
	var got []queue.Entry
	must(queuetest.Step(n.coord, func() (err error) { got, err = peer.Dequeue(10); return err }, peer))
	if len(got) != 3 {
		t.Fatalf("the peer got %d entries, want the 3 of the timed-out consumer's partition", len(got))
	}

	if !persisted {
		if err := late.Persist(); !errors.Is(err, tx.ErrNotInProgress) {
			t.Errorf("late Persist after the takeover returned %v, want ErrNotInProgress", err)
		}
	}
	if err := n.coord.Commit(t1); !errors.Is(err, tx.ErrNotInProgress) {
		t.Fatalf("late commit returned %v, want ErrNotInProgress", err)
	}
	must(late.Rollback())

	n.restart()
	c, _ := n.qs.Consumer("q", "g", 0)
	must(queuetest.Step(n.coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
	if len(got) != 0 {
		t.Fatalf("after a restart %d entries the peer committed came again", len(got))
	}
}

// A transaction that committed has ended in the coordinator before its
// consumer's PostCommit publishes the new state and releases the leases: a
// peer starting in between must not take them over — with the state before
// the commit it delivered a again; with the committed state from the store
// it delivered b before the owner's PostCommit ran (a key's PostCommits out
// of order, TestStaleSnapshotConsumersExactlyOnce): it waits
// Options.PostCommitWait for a PostCommit that does not come.
func TestCommittedLeaseNotTakenOverBeforePostCommit(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "general"}[fast], func(t *testing.T) {
			e := newEnv(t, fast)
			must := mustT(t)
			_, owner, peer := ownerAndPeer(t, e)
			var first, between []queue.Entry
			// The peer's step runs between the owner's commit and its
			// PostCommit (which keeps the fast path: a participant of its
			// own that does not stage took the general one).
			peek := queuetest.SlowPostCommit(owner, func() {
				must(queuetest.Step(e.Coord, func() (err error) { between, err = peer.Dequeue(10); return err }, peer))
			})
			must(queuetest.Step(e.Coord, func() (err error) { first, err = owner.Dequeue(1); return err }, peek))
			if len(first) != 1 || len(between) != 0 {
				t.Fatalf("owner got %d, peer between the commit and its PostCommit %d; want 1 and 0", len(first), len(between))
			}
			var after []queue.Entry
			must(queuetest.Step(e.Coord, func() (err error) { after, err = peer.Dequeue(10); return err }, peer))
			expectPayloadsOnce(t, append(first, after...), "a", "b")
		})
	}
}

// ownerAndPeer creates queue q (one partition, FIFO group g of two
// instances) holding a and b (two commits), and returns its enqueue function (fifoQueue)
// and the consumers of instances 0 and 1.
func ownerAndPeer(t *testing.T, e *queuetest.Env) (enqueue func(...string), owner, peer queue.Consumer) {
	enqueue = fifoQueue(t, e.Queues, e.Coord, 2)
	enqueue("a")
	enqueue("b")
	owner, _ = e.Queues.Consumer("q", "g", 0)
	peer, _ = e.Queues.Consumer("q", "g", 1)
	return enqueue, owner, peer
}

// deadConsumer opens a fast-path backend with queue q (one partition, FIFO
// group g of three instances) and starts instance 0's transaction with a
// 1 ms timeout, for the test to let it time out.
func deadConsumer(t *testing.T) (*queuetest.Env, func(...string), queue.Consumer, *tx.Context, *tx.Tx) {
	e := newEnv(t, true)
	enqueue := fifoQueue(t, e.Queues, e.Coord, 3)
	c, _ := e.Queues.Consumer("q", "g", 0)
	ctx := e.Coord.NewContext(c)
	t0, err := ctx.Start(time.Millisecond)
	mustT(t)(err)
	return e, enqueue, c, ctx, t0
}

// A consumer whose transaction had ended leased an idle-looking partition in
// it, a peer took the lease over while it read, and the read changed
// nothing: the dead consumer then let the partition go, the peer's lease
// with it, and a third consumer read what the peer's open transaction held.
func TestDeadLeaseReadKeepsTakersLease(t *testing.T) {
	e, enqueue, dead, deadCtx, deadTx := deadConsumer(t)
	must := mustT(t)
	taker, _ := e.Queues.Consumer("q", "g", 1)
	third, _ := e.Queues.Consumer("q", "g", 2)
	// The group's position moves past what the dead transaction may see,
	// and a newer entry waits: its read settles nothing.
	enqueue("a")
	var got []queue.Entry
	must(queuetest.Step(e.Coord, func() (err error) { got, err = third.Dequeue(10); return err }, third))
	if len(got) != 1 {
		t.Fatalf("got %d, want a", len(got))
	}
	enqueue("b")
	queuetest.WaitEnded(t, e.Coord, deadTx)

	takerCtx := e.Coord.NewContext(taker)
	_, err := takerCtx.Start(time.Minute)
	must(err)
	var taken []queue.Entry
	leasedTestHook = func(int) {
		leasedTestHook = nil
		taken, err = taker.Dequeue(10)
		must(err)
	}
	defer func() { leasedTestHook = nil }()
	if got, err := dead.Dequeue(10); err != nil || len(got) != 0 {
		t.Fatalf("the dead transaction read %d (%v), want nothing past its snapshot", len(got), err)
	}
	if len(taken) != 1 {
		t.Fatalf("the taker got %d entries, want b", len(taken))
	}
	must(queuetest.Step(e.Coord, func() (err error) { got, err = third.Dequeue(10); return err }, third))
	if len(got) != 0 {
		t.Fatalf("%q, held by the taker's open transaction, was read by another", got[0].Payload)
	}
	must(takerCtx.Finish())
	_ = deadCtx.Abort(nil)
}

// skipThenRelease has peer take its Ready channel and dequeue, finding the
// partition leased (nothing), then finishes the owner's transaction, and
// reports whether its release woke peer (nothing else commits meanwhile).
func skipThenRelease(t *testing.T, e *queuetest.Env, peer queue.Consumer, ownerCtx *tx.Context) bool {
	t.Helper()
	must := mustT(t)
	ready := peer.(queue.Notifier).Ready()
	var got []queue.Entry
	must(queuetest.Step(e.Coord, func() (err error) { got, err = peer.Dequeue(10); return err }, peer))
	if len(got) != 0 {
		t.Fatalf("read %d entries of a leased partition", len(got))
	}
	must(ownerCtx.Finish())
	select {
	case <-ready:
		return true
	default:
		return false
	}
}

// A consumer that skipped a leased partition and found nothing else waits
// for a wake-up; the lease's release must give it one when the owner does
// not come back for what it left: here the owner's instance was scaled
// away, and an entry committed after its snapshot stayed in the partition
// until some producer committed again.
func TestReleaseWakesConsumerThatSkipped(t *testing.T) {
	e := newEnv(t, true, func(o *Options) { o.EvictInterval = -1 })
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 2}))
	must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 2}))
	var key []byte // one that goes to partition 1, instance 1's
	for i := 0; key == nil; i++ {
		if k := fmt.Appendf(nil, "k%d", i); xxhash.Sum64(k)%2 == 1 {
			key = k
		}
	}
	p, _ := e.Queues.Producer("q")
	enqueue := func(s string) {
		must(queuetest.Step(e.Coord, func() error {
			return p.Enqueue(context.Background(), queue.Event{Payload: []byte(s), Key: key})
		}, p))
	}
	enqueue("a")
	c1, _ := e.Queues.Consumer("q", "g", 1)
	ctx1 := e.Coord.NewContext(c1)
	_, err := ctx1.Start(time.Minute)
	must(err)
	if got, err := c1.Dequeue(10); err != nil || len(got) != 1 {
		t.Fatalf("instance 1 got %d (%v), want a", len(got), err)
	}
	enqueue("b") // after instance 1's snapshot
	must(e.Queues.Rescale("q", "g", 1))

	c0, _ := e.Queues.Consumer("q", "g", 0)
	if !skipThenRelease(t, e, c0, ctx1) {
		t.Fatal("instance 1 released the partition instance 0 skipped without waking it")
	}
	var got []queue.Entry
	must(queuetest.Step(e.Coord, func() (err error) { got, err = c0.Dequeue(10); return err }, c0))
	if len(got) != 1 || string(got[0].Payload) != "b" {
		t.Fatalf("instance 0 got %d entries, want b", len(got))
	}
}

// Stage and Persist outside a transaction (a misused participant) write
// nothing, do not panic, and fail with queue.ErrNoTx (a Context whose
// consumer's transaction another Context ended must not commit without it:
// TestLateFinishOfGivenUpContext).
func TestStagePersistWithoutTx(t *testing.T) {
	e := newEnv(t, true)
	fifoQueue(t, e.Queues, e.Coord, 1)
	c, _ := e.Queues.Consumer("q", "g", 0)
	if ws, err := c.(tx.Stager).Stage(nil); !errors.Is(err, queue.ErrNoTx) || len(ws) != 0 {
		t.Fatalf("Stage without a transaction: %d writes, %v", len(ws), err)
	}
	if err := c.Persist(); !errors.Is(err, queue.ErrNoTx) {
		t.Fatalf("Persist without a transaction: %v", err)
	}
}

// A consumer whose transaction timed out rolls back late, keeping the moves
// of a read that delivered nothing; a peer took its partition over between
// Rollback's look at the lease and its keeping the moves, and committed an
// entry: the kept moves then replaced the peer's committed state (behind
// it), and the entry came again. "staged": the transaction staged its state
// before it timed out (its commit then failed): a rollback under way is
// waited for all the same, not taken for a transaction lost after its
// writes (leaseEndedWrote, which takes such a lease over at once).
func TestLateRollbackKeepsNoMovesOverTaker(t *testing.T) {
	for _, staged := range []bool{false, true} {
		t.Run(map[bool]string{false: "read", true: "staged"}[staged], func(t *testing.T) { lateRollbackKeepsNoMovesOverTaker(t, staged) })
	}
}

func lateRollbackKeepsNoMovesOverTaker(t *testing.T, staged bool) {
	e, enqueue, late, lateCtx, lateTx := deadConsumer(t)
	must := mustT(t)
	peer, _ := e.Queues.Consumer("q", "g", 1)
	third, _ := e.Queues.Consumer("q", "g", 2)
	enqueue("a") // after the late snapshot: its read moves over it, delivering nothing
	if got, err := late.Dequeue(10); err != nil || len(got) != 0 {
		t.Fatalf("late consumer read %d (%v), want nothing", len(got), err)
	}
	if staged {
		_, err := late.(tx.Stager).Stage(nil)
		must(err)
	}
	queuetest.WaitEnded(t, e.Coord, lateTx)
	var during []queue.Entry
	rollbackTestHook = func() {
		rollbackTestHook = nil
		must(queuetest.Step(e.Coord, func() (err error) { during, err = peer.Dequeue(10); return err }, peer))
	}
	defer func() { rollbackTestHook = nil }()
	must(lateCtx.Abort(nil))
	var after []queue.Entry
	must(queuetest.Step(e.Coord, func() (err error) { after, err = third.Dequeue(10); return err }, third))
	if n := len(during) + len(after); n != 1 {
		t.Fatalf("a delivered %d times (%d during the late rollback, %d after)", n, len(during), len(after))
	}
}

// A release wakes the consumers that skipped the partition only when it
// leaves something there: a FIFO peer that found the partition leased by a
// transaction that then consumed everything is not woken for nothing (a
// transaction start and abort each).
func TestReleaseLeavingNothingWakesNobody(t *testing.T) {
	e := newEnv(t, true, func(o *Options) { o.EvictInterval = -1 })
	must := mustT(t)
	fifoQueue(t, e.Queues, e.Coord, 2)("a", "b")
	owner, _ := e.Queues.Consumer("q", "g", 0)
	peer, _ := e.Queues.Consumer("q", "g", 1)
	ownerCtx := e.Coord.NewContext(owner)
	_, err := ownerCtx.Start(time.Minute)
	must(err)
	if got, err := owner.Dequeue(10); err != nil || len(got) != 2 {
		t.Fatalf("owner got %d (%v), want 2", len(got), err)
	}
	if skipThenRelease(t, e, peer, ownerCtx) {
		t.Fatal("the owner's release, which left nothing, woke the peer")
	}
}

// The release judges what it leaves by the committed state, not by the
// owner's snapshot: an older producer that committed while the owner held
// the partition is a hole the owner could not read, and a peer that
// skipped the partition after that commit's wake-up must be woken again.
func TestReleaseWakesForHoleOwnerCouldNotRead(t *testing.T) {
	e := newEnv(t, true, func(o *Options) { o.EvictInterval = -1 })
	must := mustT(t)
	enqueue := fifoQueue(t, e.Queues, e.Coord, 2)
	older, _ := e.Queues.Producer("q")
	olderCtx := e.Coord.NewContext(older)
	_, err := olderCtx.Start(time.Minute)
	must(err)
	must(older.Enqueue(context.Background(), queue.Event{Payload: []byte("older")}))
	enqueue("newer")
	owner, _ := e.Queues.Consumer("q", "g", 0)
	peer, _ := e.Queues.Consumer("q", "g", 1)
	ownerCtx := e.Coord.NewContext(owner)
	_, err = ownerCtx.Start(time.Minute)
	must(err)
	if got, err := owner.Dequeue(10); err != nil || len(got) != 1 {
		t.Fatalf("owner got %d (%v), want newer", len(got), err)
	}
	must(olderCtx.Finish())
	if !skipThenRelease(t, e, peer, ownerCtx) {
		t.Fatal("the owner's release left the older producer's entry and did not wake the peer")
	}
	var got []queue.Entry
	must(queuetest.Step(e.Coord, func() (err error) { got, err = peer.Dequeue(10); return err }, peer))
	if len(got) != 1 || string(got[0].Payload) != "older" {
		t.Fatalf("peer got %d entries, want older", len(got))
	}
}

// General path: a consumer's transaction persisted its state and was lost
// (timed out before its commit), and its owner gave it up and used the same
// consumer in a new transaction. The lost transaction's Persist stayed
// registered for good: the prune bound never passed its pointer, and the
// coordinator's invalid list was never pruned again ("rewritten"). Its
// version, stored until the slot is written again, still holds the bound
// ("left": an aborted empty step after a truncate must not move the
// committed state past it in memory only).
func TestReusedConsumerEndsLostPersist(t *testing.T) {
	for _, rewrite := range []bool{true, false} {
		t.Run(map[bool]string{true: "rewritten", false: "left"}[rewrite], func(t *testing.T) {
			var moved atomic.Int64
			n := newGeneralNodeClock(t, func() time.Time { return time.Now().Add(time.Duration(moved.Load())) })
			must := mustT(t)
			fifoQueue(t, n.qs, n.coord, 1)("a", "b")
			c, _ := n.qs.Consumer("q", "g", 0)
			lost, err := n.coord.StartShort(time.Minute)
			must(err)
			must(c.StartTx(lost))
			if got, err := c.Dequeue(10); err != nil || len(got) != 2 {
				t.Fatalf("got %d entries (%v), want 2", len(got), err)
			}
			must(n.coord.CanCommit(lost, nil))
			must(c.Persist())
			moved.Add(int64(2 * time.Minute))
			if n.coord.ExpireTimedOut() != 1 {
				t.Fatal("the lost transaction did not time out")
			}
			W := lost.WritePointer

			if rewrite {
				var got []queue.Entry
				must(queuetest.Step(n.coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
				if len(got) != 2 {
					t.Fatalf("the reused consumer got %d entries, want the lost transaction's 2", len(got))
				}
				must(n.b.evict())
				if n.invalid(W) {
					t.Fatalf("invalid pointer %d still held from pruning after the reused consumer rewrote its state", W)
				}
				return
			}
			must(n.qs.TruncateQueue("q"))
			if err := queuetest.Step(n.coord, func() error { _, err := c.Dequeue(10); return errors.Join(err, errAbort) }, c); !errors.Is(err, errAbort) {
				t.Fatal(err)
			}
			must(n.b.evict())
			q, _ := n.b.queue("q")
			if slices.Contains(n.storedStateVersions(q.id, q.groups["g"].meta.ID, 0), W) && !n.invalid(W) {
				t.Fatalf("the prune bound passed invalid pointer %d while a state version written by it is still stored", W)
			}
		})
	}
}
