package badgerq

import (
	"context"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// A consumer's Dequeue opens one read of the entries at the first
// partition it reads; a TTL eviction pass that expired an entry of a
// partition the Dequeue leased later (the pass held that slot until its
// deletes landed, then gave it back) had deleted it after that read
// opened: the consumer still saw it, skipped it as expired (or, its clock
// behind the pass's, delivered it) and committed, and the event counted
// twice: in the group's Expired (or Consumed) and in QueueInfo.Expired.
// Found by a stress run (consumed + expired, 901 of 900 events).
func TestTTLEvictionBetweenPartitionsOfOneRead(t *testing.T) {
	b, e := newBackendEnv(t, true, false, func(o *Options) { o.EvictInterval, o.GCInterval = -1, -1 })
	qs, must := e.Queues, mustT(t)
	must(qs.CreateQueue("q", queue.Config{Partitions: 2, TTL: time.Hour}))
	must(qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
	p, err := qs.Producer("q")
	must(err)
	for part := range uint64(2) {
		ctx := e.Coord.NewContext(p)
		_, err := ctx.Start(time.Minute)
		must(err)
		must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("e"), Key: keyFor(part, 2)}))
		must(ctx.Finish())
	}
	e.Advance(2 * time.Hour)
	// The pass runs while the Dequeue reads partition 0 (its lease there
	// keeps that entry): it expires partition 1's.
	leasedTestHook = func(p int) {
		if p == 0 {
			leasedTestHook = nil
			must(b.evict())
		}
	}
	t.Cleanup(func() { leasedTestHook = nil })
	c, err := qs.Consumer("q", "g", 0)
	must(err)
	ctx := e.Coord.NewContext(c)
	_, err = ctx.Start(time.Minute)
	must(err)
	es, err := c.Dequeue(10)
	must(err)
	must(ctx.Finish())
	info, err := qs.Info("q")
	must(err)
	gi := info.Groups[0]
	if n := int64(len(es)) + gi.Expired + info.Expired; n != 2 || gi.Consumed != int64(len(es)) {
		t.Fatalf("2 events: %d delivered (%d consumed), %d expired by the group, %d by eviction", len(es), gi.Consumed, gi.Expired, info.Expired)
	}
}
