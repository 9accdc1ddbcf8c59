package badgerq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// A group added later starts at the meet of the existing groups. When one
// group had a hole at a pointer (it passed the producer in progress) and
// another had read part of that pointer (its position inside it), the meet
// kept both: a hole from the pointer's start and the position inside it. A
// hole is read to the pointer's end, then the scan goes on from the
// position, so the new group got the events after the position twice. The
// meet now lowers the position to such a hole instead (the same events,
// each once). Found by TestEvictAgainstModel (seed 114 of 400).
func TestAddGroupMeetHoleAtPosition(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "general"}[fast], func(t *testing.T) {
			e := newEnv(t, fast, func(o *Options) { o.EvictInterval = -1 })
			must := mustT(t)
			must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1}))
			must(e.Queues.AddGroup("q", queue.Group{Name: "f", Strategy: queue.FIFO, Instances: 1}))
			must(e.Queues.AddGroup("q", queue.Group{Name: "r", Strategy: queue.FIFO, Instances: 1}))
			pX, _ := e.Queues.Producer("q")
			ctxX := e.Coord.NewContext(pX)
			_, err := ctxX.Start(time.Minute)
			must(err)
			for i := range 8 {
				must(pX.Enqueue(context.Background(), queue.Event{Payload: []byte(fmt.Sprintf("x-%d", i))}))
			}
			pY, _ := e.Queues.Producer("q")
			must(queuetest.Step(e.Coord, func() error {
				return pY.Enqueue(context.Background(), queue.Event{Payload: []byte("y")})
			}, pY))
			deq := func(g string, max int) []string {
				c, err := e.Queues.Consumer("q", g, 0)
				must(err)
				var got []queue.Entry
				must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(max); return err }, c))
				var out []string
				for _, en := range got {
					out = append(out, string(en.Payload))
				}
				return out
			}
			if got := deq("f", 10); fmt.Sprint(got) != "[y]" {
				t.Fatalf("f: %v, want [y] (x in progress: a hole)", got)
			}
			must(ctxX.Finish())
			if got := deq("r", 4); fmt.Sprint(got) != "[x-0 x-1 x-2 x-3]" {
				t.Fatalf("r: %v", got)
			}
			must(e.Queues.AddGroup("q", queue.Group{Name: "d", Strategy: queue.FIFO, Instances: 1}))
			// d gets what f or r has not consumed: all of x (f) and y (r).
			got := map[string]int{}
			for {
				es := deq("d", 100)
				if len(es) == 0 {
					break
				}
				for _, s := range es {
					got[s]++
				}
			}
			want := map[string]int{"y": 1}
			for i := range 8 {
				want[fmt.Sprintf("x-%d", i)] = 1
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("d got %v, want each of %v once", got, want)
			}
		})
	}
}
