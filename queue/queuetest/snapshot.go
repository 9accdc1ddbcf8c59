package queuetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// testOlderSnapshotConsumer: a FIFO instance whose transaction started while
// a producer was still in progress dequeues after another instance (with a
// newer snapshot) consumed part or all of that producer's events. The older
// transaction must not re-open the producer's events as a hole from their
// start: what the newer one consumed is consumed.
func testOlderSnapshotConsumer(t *testing.T, e *Env) {
	for _, firstTake := range []int{1, 2} {
		t.Run(fmt.Sprint("take=", firstTake), func(t *testing.T) {
			q := fmt.Sprint("q", firstTake)
			must(t, e.Queues.CreateQueue(q, queue.Config{Partitions: 1}))
			must(t, e.Queues.AddGroup(q, queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 2}))
			pOld, _ := e.Queues.Producer(q)
			ctxOld := e.Coord.NewContext(pOld)
			_, err := ctxOld.Start(10 * time.Second)
			must(t, err)
			must(t, pOld.Enqueue(context.Background(), ev("e-0")))
			must(t, pOld.Enqueue(context.Background(), ev("e-1")))
			produce(t, e, q, "n", 1, 1, nil) // newer, committed first

			a, _ := e.Queues.Consumer(q, "g", 0)
			b, _ := e.Queues.Consumer(q, "g", 1)
			ctxB := e.Coord.NewContext(b)
			_, err = ctxB.Start(10 * time.Second) // sees n, not e
			must(t, err)
			must(t, ctxOld.Finish())

			var all []queue.Entry
			must(t, Step(e.Coord, func() error {
				got, err := a.Dequeue(firstTake)
				all = append(all, got...)
				return err
			}, a))
			got, err := b.Dequeue(10)
			must(t, err)
			all = append(all, got...)
			must(t, ctxB.Finish())
			all = append(all, Drain(t, e, a, 10)...)
			all = append(all, Drain(t, e, b, 10)...)
			m := payloads(all)
			if len(m) != 3 || m["e-0"] != 1 || m["e-1"] != 1 || m["n-0"] != 1 {
				t.Fatalf("delivered %v, want e-0, e-1 and n-0 once each", m)
			}
		})
	}
}
