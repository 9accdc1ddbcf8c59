package badgerq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
)

// Group ids are uint16 and never reused: after 65,535 AddGroups the next id
// wrapped to 0, then 1, colliding with a live group (its cursor states).
// The queue's counter is set near its end instead of adding 65,535 groups.
func TestGroupIDsExhausted(t *testing.T) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1}))
	must(n.qs.AddGroup("q", queue.Group{Name: "first", Strategy: queue.Hash, Instances: 1}))
	q, _ := n.b.queue("q")
	q.mu.Lock()
	q.meta.NextGroup = math.MaxUint16
	q.mu.Unlock()
	must(n.qs.AddGroup("q", queue.Group{Name: "last", Strategy: queue.Hash, Instances: 1}))
	if id := q.groups["last"].meta.ID; id != math.MaxUint16 {
		t.Fatalf("last group id %d", id)
	}
	for range 2 {
		err := n.qs.AddGroup("q", queue.Group{Name: "more", Strategy: queue.Hash, Instances: 1})
		if !errors.Is(err, queue.ErrExhausted) {
			t.Fatalf("AddGroup past the last id: %v, want ErrExhausted", err)
		}
		seen := map[uint16]string{}
		for _, g := range q.meta.Groups {
			if other, dup := seen[g.ID]; dup {
				t.Fatalf("groups %q and %q share id %d", other, g.Name, g.ID)
			}
			seen[g.ID] = g.Name
		}
		n.restart() // the stored counter says the same
		q, _ = n.b.queue("q")
	}
	// The other queues are not affected.
	must(n.qs.CreateQueue("r", queue.Config{Partitions: 1}))
	must(n.qs.AddGroup("r", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
}

// Queue ids are uint32 and never reused: the counter wrapped to 0 after the
// last one.
func TestQueueIDsExhausted(t *testing.T) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(nextIDKey), binary.BigEndian.AppendUint32(nil, math.MaxUint32))
	}))
	must(n.qs.CreateQueue("last", queue.Config{Partitions: 1}))
	if q, _ := n.b.queue("last"); q.id != math.MaxUint32 {
		t.Fatalf("id %d", q.id)
	}
	err := n.qs.CreateQueue("more", queue.Config{Partitions: 1})
	if !errors.Is(err, queue.ErrExhausted) {
		t.Fatalf("CreateQueue past the last id: %v, want ErrExhausted", err)
	}
	// The last queue works, and Open's sweep of unknown ids keeps it.
	must(n.qs.AddGroup("last", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
	n.restart()
	if _, err := n.qs.Info("last"); err != nil {
		t.Fatal(fmt.Errorf("after restart: %w", err))
	}
}
