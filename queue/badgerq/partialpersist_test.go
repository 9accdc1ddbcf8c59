package badgerq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// General path: a producer's Persist writes its chunks with one WriteBatch,
// which Badger commits in several transactions when they are large, so a
// consumer may see some of them: it passes them (in progress) with a hole at
// the pointer's start and its position after the last one it saw, inside
// the pointer. Once the producer committed, the hole was read to the
// pointer's end, then the scan went on from the position: the chunks after
// it came twice. A hole read to its end on the position's pointer now moves
// the position past it.
func TestPartialPersistReadOnce(t *testing.T) {
	x := partialPersist(t, queue.Config{Partitions: 1}, "g")
	if got := x.deq("g", 10); len(got) != 0 {
		t.Fatalf("got %v of a producer in progress", got)
	}
	x.commit()
	if got := fmt.Sprint(x.deq("g", 10)); got != "[x-0 x-1 x-2]" {
		t.Fatalf("after the commit: %s, want [x-0 x-1 x-2]", got)
	}
	if got := x.deq("g", 10); len(got) != 0 {
		t.Fatalf("again: %v", got)
	}
}

// partialX is queue q on the general path with producer X in progress,
// its three one-event chunks persisted in part (the first landed), and a
// FIFO consumer of one instance per group whose snapshots read past X.
type partialX struct {
	t      *testing.T
	b      *Backend
	db     *badger.DB
	writes []tx.Write // X's chunks
	deqs   map[string]func(max int) []string
	ctxX   *tx.Context
}

func partialPersist(t *testing.T, cfg queue.Config, groups ...string) *partialX {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	coord, err := tx.Open(tx.Options{ExpiryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now() // one clock reading: the entry keys carry it
	b, err := Open(db, Options{Coordinator: coord, EvictInterval: -1, GCInterval: -1, WritebackInterval: -1, ChunkBytes: 1, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		coord.Close()
		db.Close()
	})
	qs := queue.New(b)
	must := mustT(t)
	must(qs.CreateQueue("q", cfg))
	x := &partialX{t: t, b: b, db: db, deqs: map[string]func(int) []string{}}
	for _, g := range groups {
		must(qs.AddGroup("q", queue.Group{Name: g, Strategy: queue.FIFO, Instances: 1}))
		c, err := qs.Consumer("q", g, 0)
		must(err)
		x.deqs[g] = func(max int) []string {
			var got []queue.Entry
			must(queuetest.Step(coord, func() (err error) { got, err = c.Dequeue(max); return err }, c))
			var out []string
			for _, e := range got {
				out = append(out, string(e.Payload))
			}
			return out
		}
	}
	pd, err := b.Producer("q")
	must(err)
	px := pd.(*producer)
	x.ctxX = coord.NewContext(px)
	_, err = x.ctxX.Start(time.Minute)
	must(err)
	for i := range 3 {
		must(px.Enqueue(context.Background(), queue.Event{Payload: []byte(fmt.Sprintf("x-%d", i))}))
	}
	if n := len(px.bufs[0].chunks); n != 3 {
		t.Fatalf("%d chunks, want 3", n)
	}
	// The first of the batch's transactions landed, the rest not yet.
	x.writes, _ = px.Stage(nil)
	x.land(0)

	// A later commit elsewhere: the consumer's snapshot reads past X.
	must(qs.CreateQueue("other", queue.Config{Partitions: 1}))
	py, _ := qs.Producer("other")
	must(queuetest.Step(coord, func() error { return py.Enqueue(context.Background(), queue.Event{Payload: []byte("y")}) }, py))
	return x
}

// deq runs one committed step of group's consumer.
func (x *partialX) deq(group string, max int) []string { return x.deqs[group](max) }

// land writes X's chunk i, as one of its Persist's Badger transactions.
func (x *partialX) land(i int) {
	w := x.writes[i]
	mustT(x.t)(x.db.Update(func(txn *badger.Txn) error { return txn.Set(w.Key, w.Value) }))
}

// commit commits X.
func (x *partialX) commit() { mustT(x.t)(x.ctxX.Finish()) }
