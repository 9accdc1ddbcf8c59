package badgerq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// An in-flight producer's entries (persisted before the commit, general
// path) are not in the depth yet: TTL eviction must not delete them and
// subtract them from it (the depth went below zero when the producer then
// rolled back, letting producers past MaxEvents/MaxBytes). If it commits,
// a later pass expires them.
func TestTTLEvictionInFlightDepth(t *testing.T) {
	for _, commit := range []bool{false, true} {
		t.Run(map[bool]string{false: "rollback", true: "commit"}[commit], func(t *testing.T) { testTTLEvictionInFlight(t, commit) })
	}
}

func testTTLEvictionInFlight(t *testing.T, commit bool) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	coord, err := tx.Open(tx.Options{ExpiryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	now := time.Unix(1_000_000, 0)
	b, err := Open(db, Options{Coordinator: coord, EvictInterval: -1, GCInterval: -1, WritebackInterval: -1, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	qs := queue.New(b)
	if err := qs.CreateQueue("q", queue.Config{Partitions: 1, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}); err != nil {
		t.Fatal(err)
	}
	pd, err := b.Producer("q")
	if err != nil {
		t.Fatal(err)
	}
	p := pd.(*producer)
	t1, err := coord.StartShort(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(p.StartTx(t1))
	must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("x")}))
	must(coord.CanCommit(t1, nil))
	must(p.Persist())
	now = now.Add(10 * time.Second)
	must(b.evict())
	if commit {
		must(coord.Commit(t1))
		p.PostCommit()
		must(b.evict())
	} else {
		must(p.Rollback())
		must(coord.Abort(t1))
	}
	info, err := b.Info("q")
	must(err)
	if info.Events != 0 || info.Bytes != 0 {
		t.Fatalf("depth after an in-flight producer's entries expired (commit %v): %d events, %d bytes, want 0", commit, info.Events, info.Bytes)
	}
	// Info counts the stored keys (f02ae8f), which the bug left right: the
	// counter the limits bound is where it went below zero.
	checkDepthStored(t, b, "q", 0, fmt.Sprintf("commit %v", commit))
	n := 0
	must(db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(entryTag)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	if n != 0 {
		t.Fatalf("%d entries stored, want none (expired or rolled back)", n)
	}
}
