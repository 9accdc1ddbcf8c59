package badgerq

import (
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// TruncateQueue (general path) and AddGroup to a queue with groups start a
// short transaction for its snapshot: they must work with a coordinator
// whose MaxTimeout is under the timeout they picked.
func TestSnapshotTxShortMaxTimeout(t *testing.T) {
	for name, op := range map[string]func(*queue.Queues) error{
		"TruncateQueue": func(qs *queue.Queues) error { return qs.TruncateQueue("q") },
		"AddGroup": func(qs *queue.Queues) error {
			for _, g := range []string{"a", "b"} {
				if err := qs.AddGroup("q", queue.Group{Name: g, Strategy: queue.FIFO, Instances: 1}); err != nil {
					return err
				}
			}
			return nil
		},
	} {
		db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		coord, err := tx.Open(tx.Options{ExpiryInterval: -1, MaxTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		b, err := Open(db, Options{Coordinator: coord, EvictInterval: -1, GCInterval: -1, WritebackInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		qs := queue.New(b)
		if err := qs.CreateQueue("q", queue.Config{Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		if err := op(qs); err != nil {
			t.Errorf("%s with MaxTimeout 10s: %v", name, err)
		}
		b.Close()
		coord.Close()
		db.Close()
	}
}
