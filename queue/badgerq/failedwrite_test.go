package badgerq

import (
	"context"
	"errors"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

var errInjectedDelete = errors.New("injected delete failure")

// A delete of consumed (or truncated) entries whose write fails partway —
// Badger commits a large WriteBatch in several transactions, so part of it
// may have landed — took nothing from the depth (eviction: it drifted high,
// and the pass had already moved where the next one starts, so the entries
// left were never deleted until a restart) or everything (truncate: low,
// producers past the bound). The depth now loses exactly what is gone, and
// the next pass deletes the rest.
func TestFailedDeleteDepth(t *testing.T) {
	for _, how := range []string{"evict", "truncate"} {
		t.Run(how, func(t *testing.T) {
			n := newGeneralNode(t)
			must := mustT(t)
			must(n.qs.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 10}))
			must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
			p, err := n.qs.Producer("q")
			must(err)
			for range 4 { // one entry each
				must(queuetest.Step(n.coord, func() error {
					return p.Enqueue(context.Background(), queue.Event{Payload: []byte("x")})
				}, p))
			}
			c, err := n.qs.Consumer("q", "g", 0)
			must(err)
			must(queuetest.Step(n.coord, func() error { _, err := c.Dequeue(10); return err }, c))
			remove := func() error {
				if how == "evict" {
					return n.b.evict()
				}
				return n.qs.TruncateQueue("q")
			}
			// The write deletes the first half of the keys, then fails.
			halfLands := func(db *badger.DB, keys [][]byte) error {
				if err := deleteSome(db, keys[:len(keys)/2]); err != nil {
					return err
				}
				return errInjectedDelete
			}
			deleteKeysTestHook.Store(&halfLands)
			err = remove()
			deleteKeysTestHook.Store(nil)
			if !errors.Is(err, errInjectedDelete) {
				t.Fatalf("%s with a failing write: %v, want the write's error", how, err)
			}
			checkDepthStored(t, n.b, "q", 0, "after the failed write")
			if ev, _ := storedDepth(t, n.db, mustQueue(t, n.b, "q").id); ev != 2 {
				t.Fatalf("setup: %d events stored after the half-landed delete, want 2", ev)
			}
			must(remove())
			checkDepthStored(t, n.b, "q", 0, "after the next "+how)
			if info, _ := n.qs.Info("q"); info.Events != 0 {
				t.Fatalf("depth %d after the next %s, want 0", info.Events, how)
			}
		})
	}
}

func mustQueue(t *testing.T, b *Backend, name string) *queueRT {
	t.Helper()
	q, err := b.queue(name)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// deleteSome deletes keys in one Badger transaction.
func deleteSome(db *badger.DB, keys [][]byte) error {
	return db.Update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}
