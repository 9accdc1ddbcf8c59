package badgerq

import (
	"context"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// General path: eviction read the pointers whose Persist is registered,
// then the groups' states, then opened its read of the entries. A producer
// invalidated before its Persist (it timed out after CanCommit) is passed by
// the groups without a hole; when its Persist landed between the first read
// and the last, eviction found its entries, not registered, below every
// cursor: it deleted them and took them from the depth, and the producer's
// Rollback (its commit is refused) took them from the reservations again.
// The depth went below zero for good and producers got past MaxEvents.
// Eviction now reads the registrations when it opens its read, under the
// lock Persist registers under.
// TruncateQueue read them before its read of the entries too.
func TestEvictPersistBetweenReadsDepth(t *testing.T) {
	for _, truncate := range []bool{false, true} {
		t.Run(map[bool]string{false: "evict", true: "truncate"}[truncate], func(t *testing.T) { testPersistBetweenReads(t, truncate) })
	}
}

func testPersistBetweenReads(t *testing.T, truncate bool) {
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
	must(n.coord.Invalidate(tW)) // timed out between CanCommit and Persist

	// A committed event in the same level, so eviction reads it.
	p, _ := n.qs.Producer("q")
	must(queuetest.Step(n.coord, func() error {
		return p.Enqueue(context.Background(), queue.Event{Payload: []byte("x")})
	}, p))
	c, _ := n.qs.Consumer("q", "g", 0)
	var got []queue.Entry
	must(queuetest.Step(n.coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
	if len(got) != 1 {
		t.Fatalf("got %d entries, want 1", len(got))
	}
	evictReadTestHook = func() {
		evictReadTestHook = nil
		must(pW.Persist())
	}
	defer func() { evictReadTestHook = nil }()
	if truncate {
		must(n.qs.TruncateQueue("q"))
	} else {
		must(n.b.evict())
	}
	_ = pW.Rollback() // what its Context does when the commit is refused
	must(n.b.evict())
	info, err := n.qs.Info("q")
	must(err)
	if info.Events != 0 || info.Bytes != 0 {
		t.Fatalf("depth %d events / %d bytes after the invalidated producer rolled back, want 0", info.Events, info.Bytes)
	}
	for i, want := range []bool{true, true, false} {
		err := queuetest.Step(n.coord, func() error {
			return p.Enqueue(context.Background(), queue.Event{Payload: []byte("y")})
		}, p)
		if (err == nil) != want {
			t.Fatalf("event %d into a queue of MaxEvents 2: %v", i, err)
		}
	}
}
