package badgerq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// A producer whose transaction is open (waiting for room in a full queue,
// say) is a hole in the cursor of every group that read past its pointer.
// Eviction deleted only below the lowest hole, so the entries the groups
// had consumed after it stayed and counted against the depth limits until
// that producer ended: a producer waiting for room held back the eviction
// that would make it (every producer of a bounded queue with FullWait could
// wait out FullWait at once). Eviction now also deletes the entries between
// a hole and the position that are not at a hole.
func TestEvictPastOpenProducer(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "general"}[fast], func(t *testing.T) {
			e := newEnv(t, fast, func(o *Options) { o.EvictInterval = -1 })
			must := mustT(t)
			must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 2}))
			must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
			pP, _ := e.Queues.Producer("q")
			ctxP := e.Coord.NewContext(pP)
			_, err := ctxP.Start(time.Minute) // open: older than what fills the queue
			must(err)

			pQ, _ := e.Queues.Producer("q")
			must(queuetest.Step(e.Coord, func() error {
				for _, s := range []string{"q-0", "q-1"} {
					if err := pQ.Enqueue(context.Background(), queue.Event{Payload: []byte(s)}); err != nil {
						return err
					}
				}
				return nil
			}, pQ))
			c, _ := e.Queues.Consumer("q", "g", 0)
			var got []queue.Entry
			must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
			if len(got) != 2 {
				t.Fatalf("dequeued %d, want 2", len(got))
			}
			must(e.Queues.Maintain())
			if info, _ := e.Queues.Info("q"); info.Events != 0 {
				t.Fatalf("depth %d after every event was consumed and an eviction pass, want 0 (a producer in flight held it)", info.Events)
			}
			if err := pP.Enqueue(context.Background(), queue.Event{Payload: []byte("p-0")}); err != nil {
				if errors.Is(err, queue.ErrQueueFull) {
					t.Fatalf("the open producer finds the queue full of consumed events: %v", err)
				}
				t.Fatal(err)
			}
			must(ctxP.Finish())
			// Its event lands in the hole: delivered once.
			must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
			if len(got) != 1 || string(got[0].Payload) != "p-0" {
				t.Fatalf("after the open producer committed: %v, want [p-0]", got)
			}
			must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
			if len(got) != 0 {
				t.Fatalf("again: %d entries", len(got))
			}
			must(e.Queues.Maintain())
			if info, _ := e.Queues.Info("q"); info.Events != 0 || info.Groups[0].Consumed != 3 {
				t.Fatalf("end: %+v", info)
			}
		})
	}
}
