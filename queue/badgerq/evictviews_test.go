package badgerq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/flowrun/flowrun/queue"
)

// An eviction pass opened its read of the entries at the first level it
// read and took each later partition's cursors after it: an entry that a
// producer committed and the group consumed in between was below the
// cursors the pass judged by, but not in its read. The pass moved that
// level's start point (evictFrom) past it, so no later pass ever looked
// there again: the entry stayed stored, in the depth, holding room of a
// bounded queue for good (until a restart). Found by a stress run with TTL,
// general path (events left after every group had read everything); the
// fast path has the same window.
func TestEvictSeesEntriesItsCursorsPassed(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "general"}[fast], func(t *testing.T) {
			b, e := newBackendEnv(t, fast, false, func(o *Options) { o.EvictInterval, o.GCInterval = -1, -1 })
			qs, must := e.Queues, mustT(t)
			must(qs.CreateQueue("q", queue.Config{Partitions: 2}))
			must(qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
			produce := func(part uint64) {
				p, err := qs.Producer("q")
				must(err)
				ctx := e.Coord.NewContext(p)
				_, err = ctx.Start(time.Minute)
				must(err)
				must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("e"), Key: keyFor(part, 2)}))
				must(ctx.Finish())
			}
			consume := func() {
				c, err := qs.Consumer("q", "g", 0)
				must(err)
				ctx := e.Coord.NewContext(c)
				_, err = ctx.Start(time.Minute)
				must(err)
				if es, err := c.Dequeue(10); err != nil || len(es) != 1 {
					t.Fatalf("dequeue: %d entries, %v; want 1", len(es), err)
				}
				must(ctx.Finish())
			}
			// Partition 0 has a consumed entry: the pass reads it first.
			produce(0)
			consume()
			// Before the pass takes partition 1's cursors, an entry is
			// committed there and consumed.
			evictViewsTestHook = func(p int) {
				if p == 1 {
					evictViewsTestHook = nil
					produce(1)
					consume()
				}
			}
			t.Cleanup(func() { evictViewsTestHook = nil })
			must(b.evict())
			must(b.evict())
			checkDepthStored(t, b, "q", 0, "after two passes")
			if info, err := qs.Info("q"); err != nil || info.Events != 0 {
				t.Fatalf("depth %d (%v) after two passes, every entry consumed", info.Events, err)
			}
		})
	}
}

// keyFor returns a key whose events go to partition part of parts.
func keyFor(part, parts uint64) []byte {
	for i := 0; ; i++ {
		if k := fmt.Appendf(nil, "k%d", i); xxhash.Sum64(k)%parts == part {
			return k
		}
	}
}
