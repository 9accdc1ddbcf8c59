package badgerq

import (
	"context"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// An eviction pass over a queue where nothing was consumed since the last
// pass reads nothing from Badger (an idle app's eviction ticks are free);
// after new consumption it reads and evicts again. With a TTL it always
// looks: entries can expire without any consumer moving.
func TestEvictIdlePassReadsNothing(t *testing.T) {
	for _, ttl := range []time.Duration{0, time.Hour} {
		t.Run("ttl="+ttl.String(), func(t *testing.T) {
			e := newEnv(t, true, func(o *Options) { o.EvictInterval = -1 })
			be := e.Queues.Backend().(*Backend)
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(e.Queues.CreateQueue("q", queue.Config{Partitions: 2, TTL: ttl}))
			must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
			p, err := e.Queues.Producer("q")
			must(err)
			c, err := e.Queues.Consumer("q", "g", 0)
			must(err)
			round := func(n int) {
				t.Helper()
				must(queuetest.Step(e.Coord, func() error {
					for range n {
						if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte("x")}); err != nil {
							return err
						}
					}
					return nil
				}, p))
				var got []queue.Entry
				must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(n); return err }, c))
				if len(got) != n {
					t.Fatalf("dequeued %d, want %d", len(got), n)
				}
				must(be.evict())
				if info, _ := e.Queues.Info("q"); info.Events != 0 {
					t.Fatalf("depth %d after consuming and evicting everything", info.Events)
				}
			}
			round(10)
			reads := be.evictReads.Load()
			if reads == 0 {
				t.Fatal("the first pass read nothing")
			}
			for range 3 {
				must(be.evict())
			}
			idle := be.evictReads.Load() - reads
			if ttl == 0 && idle != 0 {
				t.Fatalf("%d reads in three passes with nothing consumed", idle)
			}
			if ttl > 0 && idle == 0 {
				t.Fatal("with a TTL, passes with nothing consumed did not look for expired entries")
			}
			reads = be.evictReads.Load()
			round(5)
			if be.evictReads.Load() == reads {
				t.Fatal("a pass after new consumption read nothing")
			}
		})
	}
}
