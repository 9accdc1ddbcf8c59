package badgerq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// keysOf counts the stored keys of queue id qid (entries and cursor states).
func keysOf(t *testing.T, db *badger.DB, qid uint32) int {
	n := 0
	err := db.View(func(txn *badger.Txn) error {
		for _, pfx := range [][]byte{queuePrefix(qid), stateQueuePrefix(qid)} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: pfx})
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A producer and a consumer in flight when the queue is deleted commit
// after DeleteQueue: their entries and cursor states were written under the
// dead queue id and nothing ever removed them.
func TestDeleteQueueLeavesNoKeysOfInFlightCommits(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprint("fast=", fast), func(t *testing.T) {
			e := newEnv(t, fast, func(o *Options) { o.EvictInterval = -1 })
			be := e.Queues.Backend().(*Backend)
			must := mustT(t)
			must(e.Queues.CreateQueue("q", queue.Config{Partitions: 2}))
			must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
			q, _ := be.queue("q")
			p, _ := e.Queues.Producer("q")
			must(queuetest.Step(e.Coord, func() error {
				return p.Enqueue(context.Background(), queue.Event{Payload: []byte("a")})
			}, p))
			c, _ := e.Queues.Consumer("q", "g", 0)
			ctxC := e.Coord.NewContext(c)
			_, err := ctxC.Start(time.Minute)
			must(err)
			if got, err := c.Dequeue(10); err != nil || len(got) != 1 {
				t.Fatalf("dequeue: %d, %v", len(got), err)
			}
			ctxP := e.Coord.NewContext(p)
			_, err = ctxP.Start(time.Minute)
			must(err)
			must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("b")}))

			must(e.Queues.DeleteQueue("q"))
			must(ctxP.Finish())
			must(ctxC.Finish())
			if n := keysOf(t, be.DB(), q.id); n != 0 {
				t.Fatalf("%d keys of the deleted queue remain", n)
			}
		})
	}
}

// A crash between DeleteQueue's two writes (the metadata, then the entries)
// left the entries for good.
func TestDeleteQueueCrashLeavesNoKeys(t *testing.T) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 2}))
	must(n.qs.CreateQueue("keep", queue.Config{Partitions: 2}))
	for _, name := range []string{"q", "keep"} {
		must(n.qs.AddGroup(name, queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
		p, _ := n.qs.Producer(name)
		for i := range 3 {
			must(queuetest.Step(n.coord, func() error {
				return p.Enqueue(context.Background(), queue.Event{Payload: []byte(fmt.Sprint(i))})
			}, p))
		}
		c, _ := n.qs.Consumer(name, "g", 0)
		must(queuetest.Step(n.coord, func() error { _, err := c.Dequeue(1); return err }, c))
	}
	q, _ := n.b.queue("q")
	keep, _ := n.b.queue("keep")
	before := keysOf(t, n.db, keep.id)
	if keysOf(t, n.db, q.id) == 0 || before == 0 {
		t.Fatal("setup: no keys")
	}
	// What a crash right after DeleteQueue's first write leaves.
	must(n.db.Update(func(txn *badger.Txn) error { return txn.Delete(metaKey("q")) }))
	n.restart()
	if k := keysOf(t, n.db, q.id); k != 0 {
		t.Fatalf("%d keys of the deleted queue remain after a restart", k)
	}
	if k := keysOf(t, n.db, keep.id); k != before {
		t.Fatalf("the live queue has %d keys, had %d", k, before)
	}
	if info, err := n.qs.Info("keep"); err != nil || info.Events != 3 {
		t.Fatalf("live queue: %+v, %v", info, err)
	}
}
