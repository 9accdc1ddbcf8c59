package badgerq

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

func mustT(t testing.TB) func(error) {
	return func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// An eviction pass and a truncate that delete the same entries at once
// must count them once: the depth is what limits producers.
func TestTruncateDuringEvictionCountsOnce(t *testing.T) {
	e := newEnv(t, true, func(o *Options) { o.EvictInterval = -1 })
	be := e.Queues.Backend().(*Backend)
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 16}))
	must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	p, _ := e.Queues.Producer("q")
	c, _ := e.Queues.Consumer("q", "g", 0)
	for round := range 40 {
		for range 20 {
			must(queuetest.Step(e.Coord, func() error {
				for i := range 16 {
					if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte("x"), Key: []byte(fmt.Sprint(i))}); err != nil {
						return err
					}
				}
				return nil
			}, p))
		}
		for {
			var got []queue.Entry
			must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(1000); return err }, c))
			if len(got) == 0 {
				break
			}
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); must(be.evict()) }()
		go func() { defer wg.Done(); must(e.Queues.TruncateQueue("q")) }()
		wg.Wait()
		if info, _ := e.Queues.Info("q"); info.Events != 0 || info.Bytes != 0 {
			t.Fatalf("round %d: depth %d events, %d bytes with nothing stored", round, info.Events, info.Bytes)
		}
	}
}
