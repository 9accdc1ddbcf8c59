package badgerq

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// A producer of a deleted queue that commits after the queue was created
// again under its name, and a consumer of a removed group that commits after
// the group was added again under its name, sweep only their own (dead)
// ids: the new queue's entries and the new group's states stay.
func TestRecreatedQueueAndGroupSurviveOldCommits(t *testing.T) {
	n := newGeneralNode(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ev := func(s string) queue.Event { return queue.Event{Payload: []byte(s)} }
	produce := func(s string) {
		t.Helper()
		p, err := n.qs.Producer("q")
		must(err)
		ctx := n.coord.NewContext(p)
		_, err = ctx.Start(time.Minute)
		must(err)
		must(p.Enqueue(context.Background(), ev(s)))
		must(ctx.Finish())
	}
	drain := func(group string) []string {
		t.Helper()
		c, err := n.qs.Consumer("q", group, 0)
		must(err)
		ctx := n.coord.NewContext(c)
		_, err = ctx.Start(time.Minute)
		must(err)
		got, err := c.Dequeue(100)
		must(err)
		must(ctx.Finish())
		var out []string
		for _, e := range got {
			out = append(out, string(e.Event.Payload))
		}
		slices.Sort(out)
		return out
	}

	// Queue deleted and created again while an old producer is in flight.
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	pOld, err := n.qs.Producer("q")
	must(err)
	ctxOld := n.coord.NewContext(pOld)
	_, err = ctxOld.Start(time.Minute)
	must(err)
	must(pOld.Enqueue(context.Background(), ev("old")))
	must(n.qs.DeleteQueue("q"))
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	must(n.qs.AddGroup("q", queue.Group{Name: "h", Strategy: queue.FIFO, Instances: 1}))
	produce("new-1")
	must(ctxOld.Finish()) // lands under the dead id, swept
	if got := drain("h"); !slices.Equal(got, []string{"new-1"}) {
		t.Fatalf("re-created queue, group h: %v, want [new-1]", got)
	}

	// Group g removed and added again while its old consumer commits.
	produce("new-2")
	cOld, err := n.qs.Consumer("q", "g", 0)
	must(err)
	cctx := n.coord.NewContext(cOld)
	_, err = cctx.Start(time.Minute)
	must(err)
	got, err := cOld.Dequeue(1)
	must(err)
	if len(got) != 1 {
		t.Fatalf("old consumer got %d entries, want 1", len(got))
	}
	must(n.qs.RemoveGroup("q", "g"))
	// The new g starts where h is: after new-1.
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	must(cctx.Finish()) // its states land under the removed id, swept
	produce("new-3")
	if got := drain("g"); !slices.Equal(got, []string{"new-2", "new-3"}) {
		t.Fatalf("re-added group g: %v, want [new-2 new-3]", got)
	}
	n.restart() // Open's sweep must keep the live ids' keys too
	produce("new-4")
	if got := drain("g"); !slices.Equal(got, []string{"new-4"}) {
		t.Fatalf("re-added group g after a restart: %v, want [new-4]", got)
	}
	if got := drain("h"); !slices.Equal(got, []string{"new-2", "new-3", "new-4"}) {
		t.Fatalf("group h after a restart: %v, want [new-2 new-3 new-4]", got)
	}
}
