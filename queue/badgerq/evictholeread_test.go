package badgerq

import (
	"context"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// Eviction skipped a level when neither the lowest cursor nor the lowest
// scan position had moved since its last pass. A group that reads a hole
// (its producer committed) moves neither while an older hole stays and an
// open producer pins the position, so the entries read there stayed, and
// counted against the depth limits, until one of those producers ended: the
// room a producer waited for never came. The holes read since the last pass
// count as a move too.
func TestEvictReadHoleBehindOlderHole(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "general"}[fast], func(t *testing.T) {
			e := newEnv(t, fast, func(o *Options) { o.EvictInterval = -1 })
			must := mustT(t)
			must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 3}))
			must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
			open := func(name string) (queue.Producer, *tx.Context) {
				p, err := e.Queues.Producer("q")
				must(err)
				c := e.Coord.NewContext(p)
				_, err = c.Start(time.Minute)
				must(err)
				if name != "" {
					must(p.Enqueue(context.Background(), queue.Event{Payload: []byte(name)}))
				}
				return p, c
			}
			_, ctxA := open("a") // stays open: the older hole
			_, ctxB := open("b") // commits after the group passed it: a hole read later
			pD, _ := e.Queues.Producer("q")
			must(queuetest.Step(e.Coord, func() error {
				return pD.Enqueue(context.Background(), queue.Event{Payload: []byte("d")})
			}, pD))
			pE, ctxE := open("") // open, newer than d: pins the scan position
			c, _ := e.Queues.Consumer("q", "g", 0)
			deq := func(want ...string) {
				t.Helper()
				var got []queue.Entry
				must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
				if len(got) != len(want) {
					t.Fatalf("dequeued %d entries, want %v", len(got), want)
				}
				for i := range got {
					if string(got[i].Payload) != want[i] {
						t.Fatalf("dequeued %q, want %v", got[i].Payload, want)
					}
				}
			}
			deq("d")
			must(e.Queues.Maintain())
			must(ctxB.Finish())
			deq("b")
			must(e.Queues.Maintain())
			if info, _ := e.Queues.Info("q"); info.Events != 0 {
				t.Fatalf("depth %d after every committed event was consumed and an eviction pass, want 0", info.Events)
			}
			// a's reservation and E's two events fit in 3 (no FullWait:
			// a full queue fails at once).
			for _, s := range []string{"e-0", "e-1"} {
				if err := pE.Enqueue(context.Background(), queue.Event{Payload: []byte(s)}); err != nil {
					t.Fatalf("enqueue %s: %v", s, err)
				}
			}
			must(ctxE.Finish())
			must(ctxA.Finish())
			deq("a", "e-0", "e-1")
			deq()
			must(e.Queues.Maintain())
			if info, _ := e.Queues.Info("q"); info.Events != 0 || info.Groups[0].Consumed != 5 {
				t.Fatalf("end: %+v", info)
			}
		})
	}
}
