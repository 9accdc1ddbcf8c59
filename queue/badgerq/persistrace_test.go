package badgerq

import (
	"context"
	"testing"

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
	n, pW := invalidatedProducer(t, false) // timed out between CanCommit and Persist
	must := mustT(t)

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
	rollBackAndCheckBound(t, n, pW)
}
