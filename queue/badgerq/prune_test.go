package badgerq

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// generalNode is a backend on the general path (the coordinator has no log:
// every participant persists before the commit) whose steps a test drives by
// hand, and which it can "restart" on the same DB and coordinator.
type generalNode struct {
	t     *testing.T
	db    *badger.DB
	coord *tx.Coordinator
	b     *Backend
	qs    *queue.Queues
	fast  bool             // Options.FastPath (a node on a BadgerLog, failingLogNode)
	now   func() time.Time // Options.Now (nil: the real clock)
}

func newGeneralNode(t *testing.T) *generalNode { return newGeneralNodeClock(t, nil) }

// newGeneralNodeClock is newGeneralNode with the coordinator on clock now
// (nil: the real one), to time transactions out.
func newGeneralNodeClock(t *testing.T, now func() time.Time) *generalNode {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	coord, err := tx.Open(tx.Options{ExpiryInterval: -1, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	n := &generalNode{t: t, db: db, coord: coord}
	n.open()
	t.Cleanup(func() {
		n.b.Close()
		coord.Close()
		db.Close()
	})
	return n
}

func (n *generalNode) open() {
	b, err := Open(n.db, Options{Coordinator: n.coord, FastPath: n.fast, EvictInterval: -1, GCInterval: -1, WritebackInterval: -1, Now: n.now})
	if err != nil {
		n.t.Fatal(err)
	}
	n.b, n.qs = b, queue.New(b)
}

// restart drops the backend as a crash would (nothing rolled back) and opens
// a new one on the same DB. What the coordinator's recovery does with the
// transactions in flight at the crash (invalidate them) the test does by hand.
func (n *generalNode) restart() {
	n.b.Close()
	n.open()
}

func (n *generalNode) invalid(wp uint64) bool { return slices.Contains(n.coord.InvalidList(), wp) }

// storedStateVersions returns the write pointers of the state versions stored
// for group gid, partition part of queue qid.
func (n *generalNode) storedStateVersions(qid uint32, gid, part uint16) []uint64 {
	var wps []uint64
	err := n.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(stateKey(qid, gid, part))
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		vs, err := decodeStateValue(v)
		for _, sv := range vs {
			wps = append(wps, sv.wp)
		}
		return err
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return wps
}

// A consumer transaction persisted its new cursor state (general path) and
// the process died before the commit: recovery invalidates it, and its
// version stays stored next to the committed one until the slot is written
// again. A consumer that then aborted an empty step kept its position moves
// in memory only, eviction reported a prune bound past the dead
// transaction's pointer, the coordinator dropped it from the invalid list,
// and after the next restart the dead transaction's state counted as
// committed (its deliveries as consumed).
func TestPruneBoundKeepsCrashedConsumerState(t *testing.T) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
	p, _ := n.qs.Producer("q")
	must(queuetest.Step(n.coord, func() error {
		must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("a")}))
		return p.Enqueue(context.Background(), queue.Event{Payload: []byte("b")})
	}, p))

	// W dequeues both, persists its state, and the process dies.
	c, _ := n.qs.Consumer("q", "g", 0)
	ctxW := n.coord.NewContext(c)
	tW, err := ctxW.Start(time.Minute)
	must(err)
	if got, err := c.Dequeue(10); err != nil || len(got) != 2 {
		t.Fatalf("dequeue: %d entries, %v", len(got), err)
	}
	must(n.coord.CanCommit(tW, nil))
	must(c.Persist())
	q, _ := n.b.queue("q")
	qid, gid := q.id, q.groups["g"].meta.ID
	n.restart()
	must(n.coord.Invalidate(tW)) // recovery: W was in flight at the crash
	W := tW.WritePointer

	// The entries go (truncate); a consumer finds nothing left, moves its
	// position over the settled pointers and aborts its empty step.
	must(n.qs.TruncateQueue("q"))
	c2, _ := n.qs.Consumer("q", "g", 0)
	if err := queuetest.Step(n.coord, func() error {
		got, err := c2.Dequeue(10)
		if err == nil && len(got) != 0 {
			t.Errorf("dequeue after truncate: %d entries", len(got))
		}
		return errAbort
	}, c2); !errors.Is(err, errAbort) {
		t.Fatal(err)
	}
	must(n.b.evict())
	if slices.Contains(n.storedStateVersions(qid, gid, 0), W) && !n.invalid(W) {
		t.Errorf("the prune bound passed invalid pointer %d while a state version written by it is still stored", W)
	}

	// After a restart, no fresh transaction sees W's version as committed.
	n.restart()
	fresh, err := n.coord.StartShort(time.Minute)
	must(err)
	defer n.coord.Abort(fresh)
	for _, wp := range n.storedStateVersions(qid, gid, 0) {
		if wp == W && fresh.Visible(W) {
			t.Fatalf("state version of invalid transaction %d is visible after a restart", W)
		}
	}
	if info, _ := n.qs.Info("q"); info.Groups[0].Consumed != 0 {
		t.Fatalf("consumed %d, want 0 (W never committed)", info.Groups[0].Consumed)
	}
}

// A producer persisted its entries (general path) and then died: its
// pointer is invalidated. The bound eviction reported before that (a queue
// without groups holds it at its oldest entry, which a newer producer had
// written) already lay past the pointer, so the coordinator dropped it at
// once and the dead producer's events became visible — a group added later
// received them.
func TestPruneBoundHoldsProducerInFlight(t *testing.T) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1}))
	pW, _ := n.qs.Producer("q")
	ctxW := n.coord.NewContext(pW)
	tW, err := ctxW.Start(time.Minute)
	must(err)
	pX, _ := n.qs.Producer("q")
	must(queuetest.Step(n.coord, func() error {
		return pX.Enqueue(context.Background(), queue.Event{Payload: []byte("x")})
	}, pX))
	must(n.b.evict())

	must(pW.Enqueue(context.Background(), queue.Event{Payload: []byte("w")}))
	must(n.coord.CanCommit(tW, nil))
	must(pW.Persist())
	must(n.coord.Invalidate(tW)) // its rollback failed, or recovery after a crash
	must(n.b.evict())            // the next pass reports again (and the coordinator prunes)
	if !n.invalid(tW.WritePointer) {
		t.Fatalf("invalid pointer %d pruned while its entries are stored", tW.WritePointer)
	}
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
	c, _ := n.qs.Consumer("q", "g", 0)
	var got []queue.Entry
	must(queuetest.Step(n.coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
	if len(got) != 1 || string(got[0].Payload) != "x" {
		t.Fatalf("got %d entries %v, want only x", len(got), got)
	}
}

// A producer whose transaction timed out between CanCommit and Persist is a
// zombie: the coordinator invalidated its pointer, consumers passed it as
// settled, and eviction could report a bound past it and get it pruned —
// then the zombie's Persist wrote entries every transaction saw as
// committed. Persist now refuses a pointer below the reported bound.
func TestPersistAfterPruneRefused(t *testing.T) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
	pW, _ := n.qs.Producer("q")
	ctxW := n.coord.NewContext(pW)
	tW, err := ctxW.Start(time.Minute)
	must(err)
	must(pW.Enqueue(context.Background(), queue.Event{Payload: []byte("w")}))
	must(n.coord.CanCommit(tW, nil))
	must(n.coord.Invalidate(tW)) // timed out: the sweeper invalidates it

	pX, _ := n.qs.Producer("q")
	must(queuetest.Step(n.coord, func() error {
		return pX.Enqueue(context.Background(), queue.Event{Payload: []byte("x")})
	}, pX))
	c, _ := n.qs.Consumer("q", "g", 0)
	var got []queue.Entry
	must(queuetest.Step(n.coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
	if len(got) != 1 {
		t.Fatalf("got %d entries, want 1", len(got))
	}
	must(n.b.evict())

	perr := pW.Persist()
	fresh, err := n.coord.StartShort(time.Minute)
	must(err)
	defer n.coord.Abort(fresh)
	if perr == nil && fresh.Visible(tW.WritePointer) {
		t.Fatalf("the zombie's Persist landed under pointer %d, which every transaction sees as committed", tW.WritePointer)
	}
	if perr != nil && !errors.Is(perr, tx.ErrNotInProgress) {
		t.Fatalf("Persist: %v, want ErrNotInProgress", perr)
	}
	must(pW.Rollback())
}
