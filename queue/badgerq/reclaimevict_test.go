package badgerq

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// A background reclaim (filler writes up to flushWait, Flatten, value-log
// GC: seconds, more under load) ran on the eviction loop's goroutine, so no
// eviction pass ran meanwhile and a producer waiting for room in a bounded
// queue got none until the reclaim ended, however much was consumed: under
// load (race build, load average 11, a reclaim on every 500 ms GC tick) the
// producers of conformance DepthLimitsConcurrent waited out FullWait. Here
// a reclaim is held at its start (reclaimTestHook) while a consumed event
// fills the queue: the waiting producer must get in.
func TestEvictionRunsDuringReclaim(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "general"}[fast], func(t *testing.T) {
			e := newEnv(t, fast, func(o *Options) { o.GCInterval = time.Millisecond })
			entered, gate := make(chan struct{}), make(chan struct{})
			openGate := sync.OnceFunc(func() { close(gate) })
			var once sync.Once
			hook := func() { once.Do(func() { close(entered); <-gate }) }
			reclaimTestHook.Store(&hook)
			t.Cleanup(func() { reclaimTestHook.Store(nil); openGate() }) // before the backend closes
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 1, FullWait: time.Hour}))
			must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
			p, err := e.Queues.Producer("q")
			must(err)
			c, err := e.Queues.Consumer("q", "g", 0)
			must(err)
			produceConsume := func(payload string) {
				t.Helper()
				must(queuetest.Step(e.Coord, func() error { return p.Enqueue(context.Background(), queue.Event{Payload: []byte(payload)}) }, p))
				var got []queue.Entry
				must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
				if len(got) != 1 || string(got[0].Payload) != payload {
					t.Fatalf("dequeued %v, want %q", got, payload)
				}
			}
			// Evicted, that reclaim is due; the next GC tick starts one.
			produceConsume("a")
			select {
			case <-entered:
			case <-time.After(time.Minute): // a hang guard only
				t.Fatal("no reclaim began a minute after an eviction")
			}
			// The queue is full of a consumed event while the reclaim runs.
			produceConsume("b")
			ctx := e.Coord.NewContext(p)
			_, err = ctx.Start(time.Hour)
			must(err)
			defer ctx.Abort(nil)
			res := make(chan error, 1)
			go func() { res <- p.Enqueue(context.Background(), queue.Event{Payload: []byte("c")}) }()
			select {
			case err := <-res:
				must(err)
			case <-time.After(30 * time.Second): // a hang guard only: FullWait is an hour
				t.Error("Enqueue into a queue full of a consumed event still waiting 30 s later: no eviction while a reclaim runs")
				openGate()
				must(<-res)
			}
			must(ctx.Finish())
		})
	}
}
