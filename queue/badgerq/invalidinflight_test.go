package badgerq

import (
	"context"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// General path: a producer that persisted its entries and was then
// invalidated (it timed out before its commit) is settled for consumers —
// they pass its pointer without a hole — but its entries are not in the
// depth, and its Rollback, still to come, deletes them and drops its
// reservation. Eviction deleted them as consumed and took them from the
// depth and the reservations too: counted out twice, the depth went below
// zero and producers got past MaxEvents. Eviction now keeps the entries of
// a pointer whose Persist is registered (as TTL eviction already did);
// its Rollback deletes them.
func TestEvictInvalidatedInFlightDepth(t *testing.T) {
	for _, truncate := range []bool{false, true} {
		t.Run(map[bool]string{false: "evict", true: "truncate"}[truncate], func(t *testing.T) { testInvalidatedInFlightDepth(t, truncate) })
	}
}

// The same with TruncateQueue, which kept the entries of producers in
// progress but not those of an invalidated one still to roll back.
func testInvalidatedInFlightDepth(t *testing.T, truncate bool) {
	n, pW := invalidatedProducer(t, true)
	must := mustT(t)

	c, _ := n.qs.Consumer("q", "g", 0)
	var got []queue.Entry
	must(queuetest.Step(n.coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
	if len(got) != 0 {
		t.Fatalf("got %d entries of an invalidated producer", len(got))
	}
	if truncate {
		must(n.qs.TruncateQueue("q"))
	} else {
		must(n.b.evict())
	}
	rollBackAndCheckBound(t, n, pW)
}

// invalidatedProducer opens a general-path node with queue q (one
// partition, MaxEvents 2, FIFO group g) and a producer transaction on it
// that enqueued one event, passed CanCommit and was invalidated, as the
// sweeper does to one that timed out; persisted: it persisted before.
func invalidatedProducer(t *testing.T, persisted bool) (*generalNode, queue.Producer) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 2}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	pW, _ := n.qs.Producer("q")
	ctxW := n.coord.NewContext(pW)
	tW, err := ctxW.Start(time.Minute)
	must(err)
	must(pW.Enqueue(context.Background(), queue.Event{Payload: []byte("w")}))
	must(n.coord.CanCommit(tW, nil))
	if persisted {
		must(pW.Persist())
	}
	must(n.coord.Invalidate(tW))
	return n, pW
}

// rollBackAndCheckBound rolls back the invalidated producer pW (what its
// Context does when the commit is refused), runs an eviction and checks
// that q is empty and its bound whole: two events fit, a third does not.
func rollBackAndCheckBound(t *testing.T, n *generalNode, pW queue.Producer) {
	t.Helper()
	must := mustT(t)
	_ = pW.Rollback()
	must(n.b.evict())
	info, err := n.qs.Info("q")
	must(err)
	if info.Events != 0 || info.Bytes != 0 {
		t.Fatalf("depth %d events / %d bytes after the invalidated producer rolled back, want 0", info.Events, info.Bytes)
	}
	p, _ := n.qs.Producer("q")
	for i, want := range []bool{true, true, false} {
		err := queuetest.Step(n.coord, func() error {
			return p.Enqueue(context.Background(), queue.Event{Payload: []byte("y")})
		}, p)
		if (err == nil) != want {
			t.Fatalf("event %d into a queue of MaxEvents 2: %v", i, err)
		}
	}
}
