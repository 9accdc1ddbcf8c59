package badgerq

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// A TTL eviction pass runs while a consumer's transaction holds the
// partition, reading entries that expire meanwhile by the pass's clock:
// eviction deleted them as expired before the group read them
// (QueueInfo.Expired) while the consumer delivered them ("delivered": the
// group's Consumed) or skipped them as expired itself ("skipped": the
// group's Expired), and its commit counted them again. Each event must be
// counted once: the pass leaves unconsumed entries of a partition a
// consumer holds to a later pass. "read_to_max": no race; the group read
// an entry to its end, stopping there (a full Dequeue), and committed;
// its position stays at the entry's pointer, which the pass took for
// unread: counted expired too.
func TestTTLEvictionRacingDeliveryCountsOnce(t *testing.T) {
	for _, fast := range []bool{true, false} {
		for _, mode := range []string{"delivered", "skipped", "read_to_max"} {
			t.Run(fmt.Sprintf("fast=%v/%s", fast, mode), func(t *testing.T) {
				b, e := newBackendEnv(t, fast, false, func(o *Options) { o.EvictInterval = -1 })
				must := mustT(t)
				enqueue := fifoQueueConfig(t, e.Queues, e.Coord, queue.Config{Partitions: 1, TTL: time.Hour}, 1)
				enqueue("a", "b", "c")
				enqueue("d") // the Dequeue of 3 stops at it
				c, _ := e.Queues.Consumer("q", "g", 0)
				ctx := e.Coord.NewContext(c)
				_, err := ctx.Start(time.Minute)
				must(err)
				if mode == "skipped" {
					e.Advance(2 * time.Hour)
				}
				got, err := c.Dequeue(3)
				must(err)
				if mode == "read_to_max" {
					must(ctx.Finish())
				}
				if mode != "skipped" {
					e.Advance(2 * time.Hour)
				}
				must(b.evict()) // while the consumer holds the partition (but read_to_max)
				if mode != "read_to_max" {
					must(ctx.Finish())
				}
				must(b.evict())
				info, err := e.Queues.Info("q")
				must(err)
				g := info.Groups[0]
				if info.Events != 0 || g.Consumed != int64(len(got)) || g.Consumed+g.Expired+info.Expired != 4 {
					t.Fatalf("4 events, %d delivered: depth %d, consumed %d, expired %d by the group and %d by eviction; want 0, %d, and 4 counted once in all",
						len(got), info.Events, g.Consumed, g.Expired, info.Expired, len(got))
				}
			})
		}
	}
}

// The pass holds only the slots of the groups that have not read what it
// expires: a group whose consumers always hold the partition (here one
// whose open transaction read d) does not keep it from expiring what
// another group, without consumers, left (a, b, c, which the busy group
// read already); d, which the busy transaction may deliver, waits for it.
func TestTTLEvictionPastBusyGroup(t *testing.T) {
	b, e := newBackendEnv(t, true, false, func(o *Options) { o.EvictInterval = -1 })
	must := mustT(t)
	enqueue := fifoQueueConfig(t, e.Queues, e.Coord, queue.Config{Partitions: 1, TTL: time.Hour}, 1)
	enqueue("a", "b", "c")
	enqueue("d")
	must(e.Queues.AddGroup("q", queue.Group{Name: "idle", Strategy: queue.FIFO, Instances: 1}))
	busy, _ := e.Queues.Consumer("q", "g", 0)
	var got []queue.Entry
	must(queuetest.Step(e.Coord, func() (err error) { got, err = busy.Dequeue(3); return err }, busy))
	expectPayloadsOnce(t, got, "a", "b", "c")
	ctx := e.Coord.NewContext(busy)
	_, err := ctx.Start(time.Minute)
	must(err)
	got, err = busy.Dequeue(10)
	must(err)
	expectPayloadsOnce(t, got, "d")
	e.Advance(2 * time.Hour)
	expectDepthExpired := func(events, expired int64) {
		t.Helper()
		must(b.evict())
		info, err := e.Queues.Info("q")
		must(err)
		if info.Events != events || info.Expired != expired {
			t.Fatalf("depth %d, expired %d; want %d and %d", info.Events, info.Expired, events, expired)
		}
	}
	expectDepthExpired(1, 3)
	must(ctx.Finish())
	expectDepthExpired(0, 4)
}

// General path, after a restart: a group's slot holds two committed state
// versions ([its last commit, the one before]) until a consumer leases it
// again. An eviction pass judged whether the group had read an expiring
// entry by the older one, the one it keeps to for deleting: a read the
// last commit counted consumed was counted expired as well.
func TestTTLEvictionAfterRestartCountsOnce(t *testing.T) {
	n := newGeneralNode(t)
	var moved atomic.Int64
	n.now = func() time.Time { return time.Now().Add(time.Duration(moved.Load())) }
	n.restart()
	must := mustT(t)
	enqueue := fifoQueueConfig(t, n.qs, n.coord, queue.Config{Partitions: 1, TTL: time.Hour}, 1)
	enqueue("a")
	enqueue("b")
	c, _ := n.qs.Consumer("q", "g", 0)
	var got []queue.Entry
	must(queuetest.Step(n.coord, func() (err error) { got, err = c.Dequeue(1); return err }, c))
	expectPayloadsOnce(t, got, "a")
	n.restart()
	moved.Add(int64(2 * time.Hour))
	must(n.b.evict())
	info, err := n.qs.Info("q")
	must(err)
	g := info.Groups[0]
	if info.Events != 0 || g.Consumed != 1 || g.Consumed+g.Expired+info.Expired != 2 {
		t.Fatalf("2 events, a consumed: depth %d, consumed %d, expired %d by the group and %d by eviction; want 0, 1, and 2 counted once in all",
			info.Events, g.Consumed, g.Expired, info.Expired)
	}
}

// A pass that expired entries a group had not read held the group's slot
// while it deleted them (mayExpire) and gives it back: the group's consumer
// reads what comes after.
func TestTTLEvictionGivesSlotsBack(t *testing.T) {
	b, e := newBackendEnv(t, true, false, func(o *Options) { o.EvictInterval = -1 })
	must := mustT(t)
	enqueue := fifoQueueConfig(t, e.Queues, e.Coord, queue.Config{Partitions: 1, TTL: time.Hour}, 1)
	enqueue("a")
	e.Advance(2 * time.Hour)
	must(b.evict())
	if info, err := e.Queues.Info("q"); err != nil || info.Expired != 1 {
		t.Fatalf("expired %d (%v), want a", info.Expired, err)
	}
	enqueue("b")
	c, _ := e.Queues.Consumer("q", "g", 0)
	expectPayloadsOnce(t, queuetest.Drain(t, e, c, 10), "b")
}

// A consumer transaction lost before it wrote (its step stuck past its
// timeout: the coordinator ended it) holds its partition until a taker
// comes, maybe never (the group's only consumer is the stuck one). A pass
// left every entry that group had not read to a later pass, for good: TTL
// bounded the backlog no more. The pass takes such a lease over as a
// taker would (its state in memory is the slot's), and the lost
// transaction's late rollback leaves the slot alone.
func TestTTLEvictionPastLostLease(t *testing.T) {
	forTTLQueue(t, func(t *testing.T, b *Backend, e *queuetest.Env, enqueue func(...string), c queue.Consumer) {
		must := mustT(t)
		enqueue("a", "b")
		ctx := e.Coord.NewContext(c)
		lost, err := ctx.Start(time.Minute)
		must(err)
		if got, err := c.Dequeue(1); err != nil || len(got) != 1 {
			t.Fatalf("the consumer to lose got %d entries (%v), want a", len(got), err)
		}
		must(e.Coord.Invalidate(lost)) // timed out
		e.Advance(2 * time.Hour)
		check := func(when string) {
			t.Helper()
			must(b.evict())
			info, err := e.Queues.Info("q")
			must(err)
			if g := info.Groups[0]; info.Events != 0 || g.Consumed != 0 || g.Expired+info.Expired != 2 {
				t.Fatalf("%s: 2 events expired: depth %d, consumed %d, expired %d by the group and %d by eviction; want 0, 0 and 2",
					when, info.Events, g.Consumed, g.Expired, info.Expired)
			}
		}
		check("lease lost")
		must(ctx.Abort(nil)) // late
		check("after the late abort")
		enqueue("c")
		expectPayloadsOnce(t, queuetest.Drain(t, e, c, 10), "c")
	})
}

// A group read part of an entry (a Dequeue stopped inside it) and
// committed; the rest expired. The pass counted every event of the entry
// in QueueInfo.Expired, those the group had consumed too: a consumed and
// expired, 3 counts for 2 events. It counts those some group has not read
// (undone), as a consumer that skips the rest counts only the rest.
func TestTTLEvictionPartlyReadEntryCountsOnce(t *testing.T) {
	forTTLQueue(t, func(t *testing.T, b *Backend, e *queuetest.Env, enqueue func(...string), c queue.Consumer) {
		must := mustT(t)
		enqueue("a", "b") // one entry
		var got []queue.Entry
		must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(1); return err }, c))
		expectPayloadsOnce(t, got, "a")
		e.Advance(2 * time.Hour)
		must(b.evict())
		expectCountedOnce(t, e.Queues, 1, 2)
	})
}

// The pass runs between a consumer's commit, which delivered a, and its
// PostCommit: the lease's transaction ended after it wrote, and the state
// in memory is the one before the commit. The pass must leave the lease to
// its PostCommit (or a consumer that reads the store, adoptLocked), not
// take it over as one lost before it wrote: it counted a expired, which
// the commit delivered, and the PostCommit then left the slot alone (a
// counted expired, not consumed). Its snapshot ends with it.
func TestTTLEvictionLeavesUnpublishedCommit(t *testing.T) {
	forTTLQueue(t, func(t *testing.T, b *Backend, e *queuetest.Env, enqueue func(...string), c queue.Consumer) {
		must := mustT(t)
		enqueue("a")
		enqueue("b")
		var got []queue.Entry
		gap := queuetest.SlowPostCommit(c, func() {
			e.Advance(2 * time.Hour)
			must(b.evict())
			if ids := e.Coord.InProgress(); len(ids) != 0 {
				t.Errorf("transactions %v in progress after the pass, want none (its snapshot ended)", ids)
			}
		})
		must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(1); return err }, gap))
		expectPayloadsOnce(t, got, "a")
		must(b.evict())
		expectCountedOnce(t, e.Queues, 1, 2)
	})
}

// expectCountedOnce checks that queue q (group g first) holds no event and
// that each of its events counts once: consumed by g (consumed of them),
// expired by it, or expired by eviction (QueueInfo.Expired).
func expectCountedOnce(t *testing.T, qs *queue.Queues, consumed, events int64) {
	t.Helper()
	info, err := qs.Info("q")
	if err != nil {
		t.Fatal(err)
	}
	if g := info.Groups[0]; info.Events != 0 || g.Consumed != consumed || g.Consumed+g.Expired+info.Expired != events {
		t.Fatalf("%d events, %d consumed: depth %d, consumed %d, expired %d by the group and %d by eviction; want 0, %d, and %d counted once in all",
			events, consumed, info.Events, g.Consumed, g.Expired, info.Expired, consumed, events)
	}
}

// forTTLQueue runs fn on the fast path and on the general one, each with
// queue q (one partition, TTL one hour, FIFO group g of one instance, no
// background eviction), its enqueue function (fifoQueueConfig) and g's
// consumer.
func forTTLQueue(t *testing.T, fn func(t *testing.T, b *Backend, e *queuetest.Env, enqueue func(...string), c queue.Consumer)) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprint("fast=", fast), func(t *testing.T) {
			b, e := newBackendEnv(t, fast, false, func(o *Options) { o.EvictInterval = -1 })
			enqueue := fifoQueueConfig(t, e.Queues, e.Coord, queue.Config{Partitions: 1, TTL: time.Hour}, 1)
			c, err := e.Queues.Consumer("q", "g", 0)
			if err != nil {
				t.Fatal(err)
			}
			fn(t, b, e, enqueue, c)
		})
	}
}
