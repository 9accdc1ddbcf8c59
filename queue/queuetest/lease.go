package queuetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// testLostConsumer: a consumer whose transaction is never finished (its
// goroutine lost) stops holding its partitions once the coordinator timed
// the transaction out. The next taker (another FIFO instance, or a new
// consumer of the same hash / round-robin instance) gets the entries; the
// lost transaction's late commit fails and moves no cursor, and its late
// rollback leaves the taker's lease alone.
func testLostConsumer(t *testing.T, e *Env) {
	for _, s := range []queue.Strategy{queue.FIFO, queue.Hash, queue.RoundRobin} {
		for _, late := range []lateEnd{lateFinish, lateAbort} {
			t.Run(string(s)+"/late_"+late.String(), func(t *testing.T) { lostConsumer(t, e, s, late) })
		}
	}
	t.Run("hash/same_consumer_new_tx", func(t *testing.T) { lostConsumerReused(t, e) })
	t.Run("hash/rescaled_away", func(t *testing.T) { lostConsumerRescaledAway(t, e) })
	t.Run("wakes_waiting_peer", func(t *testing.T) { lostConsumerWakes(t, e, false) })
	t.Run("wakes_waiting_peer/post_commit_lost", func(t *testing.T) { lostConsumerWakes(t, e, true) })
}

// lostConsumerReused: the consumer whose transaction was given up is used
// again in a new transaction (its owner gave the old one up): it gets the
// entries again, once.
func lostConsumerReused(t *testing.T, e *Env) {
	keyedQueue(t, e, "lost-reused", 2, queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}, 10)
	c, err := e.Queues.Consumer("lost-reused", "g", 0)
	must(t, err)
	lostTx, err := e.Coord.NewContext(c).Start(time.Millisecond)
	must(t, err)
	if held, err := c.Dequeue(10); err != nil || len(held) != 10 {
		t.Fatalf("the consumer got %d entries (%v), want 10", len(held), err)
	}
	WaitEnded(t, e.Coord, lostTx)
	expectExactly(t, payloads(Drain(t, e, c, 4)), "e", 10)
}

// lostConsumerRescaledAway: the lost consumer's instance is scaled away
// while its transaction is open; the remaining instance takes its
// partitions over once the transaction timed out, and the late Finish
// changes nothing.
func lostConsumerRescaledAway(t *testing.T, e *Env) {
	const n = 20
	keyedQueue(t, e, "lost-rescaled", 4, queue.Group{Name: "g", Strategy: queue.Hash, Instances: 2}, n)
	lost, err := e.Queues.Consumer("lost-rescaled", "g", 1)
	must(t, err)
	lostCtx := e.Coord.NewContext(lost)
	lostTx, err := lostCtx.Start(time.Millisecond)
	must(t, err)
	if held, err := lost.Dequeue(n); err != nil || len(held) == 0 {
		t.Fatalf("the consumer to lose got %d entries (%v)", len(held), err)
	}
	must(t, e.Queues.Rescale("lost-rescaled", "g", 1))
	WaitEnded(t, e.Coord, lostTx)
	c, err := e.Queues.Consumer("lost-rescaled", "g", 0)
	must(t, err)
	all := Drain(t, e, c, n)
	if len(all) != n {
		t.Fatalf("the remaining instance got %d of %d entries: the lost transaction's partitions stay leased", len(all), n)
	}
	if err := lostCtx.Finish(); !errors.Is(err, tx.ErrNotInProgress) {
		t.Fatalf("the timed-out transaction's commit returned %v, want ErrNotInProgress", err)
	}
	expectExactly(t, payloads(append(all, Drain(t, e, c, n)...)), "e", n)
}

// lateEnd is how a lost consumer transaction ends late (lostConsumer).
type lateEnd int

const (
	lateFinish     lateEnd = iota // lost before it wrote, its Finish comes late
	lateAbort                     // lost before it wrote, its Abort comes late
	lateAfterWrite                // lost after its Stage or Persist, which then returns
)

func (l lateEnd) String() string {
	return [...]string{"finish", "abort", "after_write"}[l]
}

func lostConsumer(t *testing.T, e *Env, s queue.Strategy, late lateEnd) {
	qn := fmt.Sprintf("lost-%s-%v", s, late)
	const n = 40
	keyedQueue(t, e, qn, 4, queue.Group{Name: "g", Strategy: s, Instances: 2}, n)

	lost, err := e.Queues.Consumer(qn, "g", 0)
	must(t, err)
	var lostCtx *tx.Context
	var afterWrite *lostAfterWrite
	var lostTx *tx.Tx
	if late == lateAfterWrite {
		afterWrite, err = startLostAfterWrite(e, lost)
		must(t, err)
	} else {
		lostCtx = e.Coord.NewContext(lost)
		lostTx, err = lostCtx.Start(time.Millisecond)
		must(t, err)
	}
	held, err := lost.Dequeue(n)
	must(t, err)
	if len(held) == 0 {
		t.Fatal("the consumer to lose got nothing")
	}
	if afterWrite != nil {
		must(t, afterWrite.lose(e))
	} else {
		WaitEnded(t, e.Coord, lostTx)
	}

	takerInstance := 0 // hash, round robin: the same instance's partitions
	if s == queue.FIFO {
		takerInstance = 1
	}
	taker, err := e.Queues.Consumer(qn, "g", takerInstance)
	must(t, err)
	takerCtx := e.Coord.NewContext(taker)
	_, err = takerCtx.Start(time.Minute)
	must(t, err)
	first, err := taker.Dequeue(1)
	must(t, err)
	if len(first) != 1 {
		t.Fatalf("the taker got %d entries: the partitions of a consumer whose transaction timed out stay leased", len(first))
	}
	if !slices.ContainsFunc(held, func(x queue.Entry) bool { return x.ID.Partition == first[0].ID.Partition }) {
		t.Fatalf("the taker read partition %d, which the lost consumer did not hold", first[0].ID.Partition)
	}

	switch late {
	case lateFinish:
		if err := lostCtx.Finish(); !errors.Is(err, tx.ErrNotInProgress) {
			t.Fatalf("the timed-out transaction's commit returned %v, want ErrNotInProgress", err)
		}
	case lateAbort:
		must(t, lostCtx.Abort(nil))
	case lateAfterWrite:
		if err := afterWrite.late(); !errors.Is(err, tx.ErrNotInProgress) {
			t.Fatalf("the timed-out transaction's commit returned %v, want ErrNotInProgress", err)
		}
	}

	// The taker's transaction still holds its partition: nobody else reads it.
	other, err := e.Queues.Consumer(qn, "g", takerInstance)
	must(t, err)
	var rest []queue.Entry
	must(t, Step(e.Coord, func() (err error) { rest, err = other.Dequeue(n); return err }, other))
	for _, x := range rest {
		if x.ID.Partition == first[0].ID.Partition {
			t.Fatalf("partition %d, leased by the taker's open transaction, was read by another (%s) after the lost one's late end", x.ID.Partition, x.Payload)
		}
	}
	more, err := taker.Dequeue(n)
	must(t, err)
	must(t, takerCtx.Finish())

	all := slices.Concat(first, rest, more)
	for i := range 2 {
		c, err := e.Queues.Consumer(qn, "g", i)
		must(t, err)
		all = append(all, Drain(t, e, c, n)...)
	}
	expectExactly(t, payloads(all), "e", n)
}

// lostConsumerWakes: a FIFO peer that found every partition leased by a
// transaction that later times out, and waits, is woken (nothing else will
// commit to the queue) and takes the partitions over. postCommitLost: the
// lost transaction read 5 of the 10 entries and committed, and its
// consumer's PostCommit never runs; the peer gets the other 5.
func lostConsumerWakes(t *testing.T, e *Env, postCommitLost bool) {
	qn, partitions := "lost-wake", 2
	if postCommitLost {
		qn, partitions = "lost-wake-post", 1 // the lost transaction holds it
	}
	keyedQueue(t, e, qn, partitions, queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 2}, 10)
	peer, err := e.Queues.Consumer(qn, "g", 1)
	must(t, err)
	nt, ok := peer.(queue.Notifier)
	if !ok {
		t.Skip("backend's consumers do not implement queue.Notifier")
	}
	lost, err := e.Queues.Consumer(qn, "g", 0)
	must(t, err)
	var held []queue.Entry
	if postCommitLost {
		must(t, Step(e.Coord, func() (err error) { held, err = lost.Dequeue(5); return err }, WithoutPostCommit(lost)))
		if len(held) != 5 {
			t.Fatalf("the consumer whose PostCommit is lost got %d entries, want 5", len(held))
		}
	} else {
		lostCtx := e.Coord.NewContext(lost)
		_, err = lostCtx.Start(200 * time.Millisecond)
		must(t, err)
		if held, err = lost.Dequeue(10); err != nil || len(held) != 10 {
			t.Fatalf("the consumer to lose got %d entries (%v), want 10", len(held), err)
		}
		held = nil // never committed
	}
	var got []queue.Entry
	for len(got) == 0 {
		ready := nt.Ready()
		must(t, Step(e.Coord, func() (err error) { got, err = peer.Dequeue(10); return err }, peer))
		if len(got) > 0 {
			break
		}
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Fatal("the waiting peer was not woken 30 s after the lost transaction ended")
		}
	}
	all := slices.Concat(held, got, Drain(t, e, peer, 10))
	expectExactly(t, payloads(all), "e", 10)
}

// keyedQueue creates queue qn with group g and commits n events e-0 … e-(n-1)
// in one transaction, each with its own key.
func keyedQueue(t *testing.T, e *Env, qn string, partitions int, g queue.Group, n int) {
	must(t, e.Queues.CreateQueue(qn, queue.Config{Partitions: partitions}))
	must(t, e.Queues.AddGroup(qn, g))
	produce(t, e, qn, "e", n, n, func(i int) []byte { return []byte(fmt.Sprint(i)) })
}

// WaitEnded waits until coordinator c has timed t0 out (the bound only
// guards against a hang).
func WaitEnded(t testing.TB, c *tx.Coordinator, t0 *tx.Tx) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for slices.Contains(c.InProgress(), t0.ID) {
		if time.Now().After(deadline) {
			t.Fatalf("tx %d still in progress 30 s after its timeout", t0.ID)
		}
		c.ExpireTimedOut()
		time.Sleep(time.Millisecond)
	}
}

// testRandomizedLostConsumers: consumers of a hash and a FIFO group, while
// producers commit, now and then lose a transaction (left open until it
// times out, then finished or aborted late from another goroutine; or lost
// after the consumer staged or persisted, ended by the coordinator, its
// Finish going on late) or the PostCommit of a committed one (run late from
// another goroutine), and go on with a new consumer of the same instance.
// Every event is consumed exactly once per group, by committed
// transactions only.
func testRandomizedLostConsumers(t *testing.T, e *Env) {
	const producers, perProducer = 2, 400
	groups := hashAndFIFO(t, e, 2)
	committed, producersDone := randomProducers(t, e, producers, perProducer)
	total := int64(producers * perProducer)
	var late sync.WaitGroup
	results := consumeGroups(t, groups, total, 11, func(g queue.Group, i int, rng *rand.Rand) func() ([]queue.Entry, bool) {
		return func() ([]queue.Entry, bool) {
			c, err := e.Queues.Consumer("q", g.Name, i)
			if err != nil {
				t.Error(err)
				return nil, false
			}
			switch rng.IntN(12) {
			case 0: // lose this one after its consumer wrote
				return loseAfterWriteLate(t, e, c, rng, &late)
			case 1: // commit it, and its PostCommit comes late
				return commitPostCommitLate(t, e, c, rng, &late)
			case 2, 3: // lose this one before it wrote
				ctx := e.Coord.NewContext(c)
				t0, err := ctx.Start(5 * time.Millisecond)
				if err != nil {
					t.Error(err)
					return nil, false
				}
				if _, err := c.Dequeue(1 + rng.IntN(30)); err != nil {
					t.Error(err)
				}
				finish := rng.IntN(2) == 0
				late.Add(1)
				go func() {
					defer late.Done()
					for slices.Contains(e.Coord.InProgress(), t0.ID) {
						e.Coord.ExpireTimedOut()
						time.Sleep(time.Millisecond)
					}
					if !finish {
						ctx.Abort(nil)
					} else if err := ctx.Finish(); !errors.Is(err, tx.ErrNotInProgress) {
						t.Errorf("late Finish of a timed-out consumer transaction: %v", err)
					}
				}()
				return nil, true
			}
			var got []queue.Entry
			if err := Step(e.Coord, func() (err error) { got, err = c.Dequeue(1 + rng.IntN(30)); return err }, c); err != nil {
				t.Error(err)
				return nil, false
			}
			return got, true
		}
	})
	producersDone()
	late.Wait()
	checkOncePerGroup(t, groups, results, committed, total)
}

// loseAfterWriteLate is a step of testRandomizedLostConsumers over consumer
// c lost after c wrote its state; the lost goroutine's Finish goes on after
// a while, on a goroutine late counts.
func loseAfterWriteLate(t *testing.T, e *Env, c queue.Consumer, rng *rand.Rand, late *sync.WaitGroup) ([]queue.Entry, bool) {
	l, err := startLostAfterWrite(e, c)
	if err != nil {
		t.Error(err) // not Fatal: another goroutine
		return nil, false
	}
	if _, err := c.Dequeue(1 + rng.IntN(30)); err != nil {
		t.Error(err)
	}
	if err := l.lose(e); err != nil {
		t.Error(err)
		return nil, false
	}
	goLate(rng, late, func() {
		if err := l.late(); !errors.Is(err, tx.ErrNotInProgress) {
			t.Errorf("late Finish of a consumer transaction lost after it wrote: %v", err)
		}
	})
	return nil, true
}

// goLate runs fn on a goroutine late counts, up to 20 ms from now.
func goLate(rng *rand.Rand, late *sync.WaitGroup, fn func()) {
	wait := time.Duration(rng.IntN(20)) * time.Millisecond
	late.Add(1)
	go func() {
		defer late.Done()
		time.Sleep(wait) // not a synchronisation: how late it comes
		fn()
	}()
}

// commitPostCommitLate is a step of testRandomizedLostConsumers over
// consumer c that commits without running c's PostCommit, which comes after
// a while, on a goroutine late counts.
func commitPostCommitLate(t *testing.T, e *Env, c queue.Consumer, rng *rand.Rand, late *sync.WaitGroup) ([]queue.Entry, bool) {
	var got []queue.Entry
	if err := Step(e.Coord, func() (err error) { got, err = c.Dequeue(1 + rng.IntN(30)); return err }, WithoutPostCommit(c)); err != nil {
		t.Error(err)
		return nil, false
	}
	goLate(rng, late, c.PostCommit)
	return got, true
}
