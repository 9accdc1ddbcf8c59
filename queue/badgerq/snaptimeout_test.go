package badgerq

import (
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// TruncateQueue on the general path starts a short transaction for its
// snapshot: it must work with a coordinator whose MaxTimeout is under the
// timeout it picked.
func TestTruncateShortMaxTimeout(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	coord, err := tx.Open(tx.Options{ExpiryInterval: -1, MaxTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	b, err := Open(db, Options{Coordinator: coord, EvictInterval: -1, GCInterval: -1, WritebackInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	qs := queue.New(b)
	if err := qs.CreateQueue("q", queue.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := qs.TruncateQueue("q"); err != nil {
		t.Fatalf("TruncateQueue with MaxTimeout 10s: %v", err)
	}
}

// AddGroup to a queue with groups takes a snapshot the same way.
func TestAddGroupShortMaxTimeout(t *testing.T) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	coord, err := tx.Open(tx.Options{ExpiryInterval: -1, MaxTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	b, err := Open(db, Options{Coordinator: coord, EvictInterval: -1, GCInterval: -1, WritebackInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	qs := queue.New(b)
	if err := qs.CreateQueue("q", queue.Config{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"a", "b"} {
		if err := qs.AddGroup("q", queue.Group{Name: g, Strategy: queue.FIFO, Instances: 1}); err != nil {
			t.Fatalf("AddGroup %s with MaxTimeout 10s: %v", g, err)
		}
	}
}
