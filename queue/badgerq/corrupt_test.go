package badgerq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// corruptNode is a general-path node with queue "q" (4 partitions, group
// "g", hash, 1 instance) holding three committed events.
func corruptNode(t *testing.T) (*generalNode, *queueRT) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 4}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
	p, err := n.qs.Producer("q")
	must(err)
	must(queuetest.Step(n.coord, func() error {
		for i := range 3 {
			if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte(fmt.Sprint(i)), Key: []byte("k")}); err != nil {
				return err
			}
		}
		return nil
	}, p))
	q, err := n.b.queue("q")
	must(err)
	return n, q
}

// rawSet writes v under k with the raw DB, as a corrupted store would hold.
func rawSet(t *testing.T, db *badger.DB, k, v []byte) {
	t.Helper()
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set(k, v) }); err != nil {
		t.Fatal(err)
	}
}

// firstKey returns the first stored key under prefix.
func firstKey(t *testing.T, db *badger.DB, prefix []byte) []byte {
	t.Helper()
	var k []byte
	_ = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		if it.Rewind(); it.Valid() {
			k = it.Item().KeyCopy(nil)
		}
		return nil
	})
	if k == nil {
		t.Fatalf("no key under %q", prefix)
	}
	return k
}

// exercise runs every reading and writing call on n's backend and fails the
// test on a panic or on an error that is not one of the typed ones.
func exercise(t *testing.T, n *generalNode) {
	t.Helper()
	ok := func(what string, err error) {
		t.Helper()
		if err != nil && !errors.Is(err, queue.ErrCorrupt) && !errors.Is(err, queue.ErrUnknownQueue) &&
			!errors.Is(err, queue.ErrUnknownGroup) && !errors.Is(err, queue.ErrUnknownInstance) && !errors.Is(err, queue.ErrExists) && !errors.Is(err, queue.ErrQueueFull) && !errors.Is(err, queue.ErrEventTooLarge) {
			t.Errorf("%s: untyped error %v", what, err)
		}
	}
	call := func(what string, fn func() error) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("%s panicked: %v", what, r)
			}
		}()
		ok(what, fn())
	}
	call("Info", func() error { _, err := n.qs.Info("q"); return err })
	call("List", func() error { _, err := n.qs.List(); return err })
	call("Scan", func() error {
		return n.qs.Scan("q", queue.ScanOptions{}, func(queue.Entry) bool { return true })
	})
	call("Enqueue", func() error {
		p, err := n.qs.Producer("q")
		if err != nil {
			return err
		}
		return queuetest.Step(n.coord, func() error {
			for i := range 5 {
				if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte{byte(i)}}); err != nil {
					return err
				}
			}
			return nil
		}, p)
	})
	call("Dequeue", func() error {
		c, err := n.qs.Consumer("q", "g", 0)
		if err != nil {
			return err
		}
		return queuetest.Step(n.coord, func() error { _, err := c.Dequeue(100); return err }, c)
	})
	call("AddGroup", func() error {
		return n.qs.AddGroup("q", queue.Group{Name: "h", Strategy: queue.FIFO, Instances: 1})
	})
	call("Maintain", func() error { return n.b.evict() })
	call("CreateQueue", func() error { return n.qs.CreateQueue("other", queue.Config{Partitions: 1}) })
}

// reopen opens a new backend on n's DB, which must open or fail with
// queue.ErrCorrupt, without a panic; it reports whether it opened.
func reopen(t *testing.T, n *generalNode) (opened bool) {
	t.Helper()
	n.b.Close()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("Open panicked: %v", r)
			opened = false
		}
	}()
	b, err := Open(n.db, Options{Coordinator: n.coord, EvictInterval: -1, GCInterval: -1, WritebackInterval: -1})
	if err != nil {
		if !errors.Is(err, queue.ErrCorrupt) {
			t.Errorf("Open: %v, want an error wrapping queue.ErrCorrupt", err)
		}
		// Later cleanups close n.b: give them a closed backend of the
		// same DB.
		n.b = &Backend{closed: true, stop: make(chan struct{})}
		close(n.b.stop)
		return false
	}
	n.b, n.qs = b, queue.New(b)
	return true
}

func metaJSON(t *testing.T, m queueMeta) []byte {
	v, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Garbage under a queue's keys — values and keys a crash, a bug or a disk
// could leave — must come back as a typed error (queue.ErrCorrupt, or the
// garbage is skipped), never as a panic: at Open, and from every call of a
// backend that is open. Before, an entry key of a partition the queue does
// not have panicked Info and List (index out of range), a queue's metadata
// with a partition count of 0 or below panicked Open (makeslice) or every
// Enqueue and FIFO Dequeue (integer divide by zero), a group with 0
// instances looped Dequeue... and corrupt values came back as errors no
// sentinel of package queue matched.
func TestCorruptStoreNoPanic(t *testing.T) {
	type corruption func(t *testing.T, n *generalNode, q *queueRT)
	meta := func(change func(m *queueMeta)) corruption {
		return func(t *testing.T, n *generalNode, q *queueRT) {
			m := q.meta
			m.Groups = append([]groupMeta(nil), m.Groups...)
			change(&m)
			rawSet(t, n.db, metaKey("q"), metaJSON(t, m))
		}
	}
	entryValue := func(v []byte) corruption {
		return func(t *testing.T, n *generalNode, q *queueRT) {
			rawSet(t, n.db, firstKey(t, n.db, queuePrefix(q.id)), v)
		}
	}
	entryKeyAs := func(change func(k *entryKey)) corruption {
		return func(t *testing.T, n *generalNode, q *queueRT) {
			k, _ := decodeEntryKey(firstKey(t, n.db, queuePrefix(q.id)))
			change(&k)
			rawSet(t, n.db, k.encode(nil), appendEvent([]byte{valueVersion}, &queue.Event{Payload: []byte("x")}))
		}
	}
	cases := []struct {
		name string
		do   corruption
	}{
		{"entry value garbage", entryValue([]byte{valueVersion, 0xff, 0xff})},
		{"entry value empty", entryValue(nil)},
		{"entry value wrong version", entryValue([]byte{9, 0, 1, 'x'})},
		{"entry key partition out of range", entryKeyAs(func(k *entryKey) { k.part = 999 })},
		{"entry key count huge", entryKeyAs(func(k *entryKey) { k.count = math.MaxUint32 })},
		{"entry key last chunk", entryKeyAs(func(k *entryKey) { k.chunk = math.MaxUint32; k.wp++ })},
		{"entry key short", func(t *testing.T, n *generalNode, q *queueRT) {
			rawSet(t, n.db, append(levelPrefix(q.id, 0, 0), 1, 2), []byte{valueVersion})
		}},
		{"state value garbage", func(t *testing.T, n *generalNode, q *queueRT) {
			rawSet(t, n.db, stateKey(q.id, q.meta.Groups[0].ID, 0), []byte{valueVersion, 3, 1, 2})
		}},
		{"state value empty", func(t *testing.T, n *generalNode, q *queueRT) {
			rawSet(t, n.db, stateKey(q.id, q.meta.Groups[0].ID, 1), nil)
		}},
		{"state value many holes", func(t *testing.T, n *generalNode, q *queueRT) {
			st := partState{levels: []levelState{{prio: 0, pos: position{wp: 5}, holes: []position{{wp: 9}, {wp: 2}, {wp: 9}}}, {prio: 0}}}
			rawSet(t, n.db, stateKey(q.id, q.meta.Groups[0].ID, 0), encodeStateValue(stateVersion{st: st}))
		}},
		{"meta not JSON", func(t *testing.T, n *generalNode, q *queueRT) { rawSet(t, n.db, metaKey("q"), []byte("{garbage")) }},
		{"meta empty", func(t *testing.T, n *generalNode, q *queueRT) { rawSet(t, n.db, metaKey("q"), nil) }},
		{"meta partitions 0", meta(func(m *queueMeta) { m.Config.Partitions = 0 })},
		{"meta partitions negative", meta(func(m *queueMeta) { m.Config.Partitions = -1 })},
		{"meta partitions too many", meta(func(m *queueMeta) { m.Config.Partitions = queue.MaxPartitions + 1 })},
		{"meta partitions huge", meta(func(m *queueMeta) { m.Config.Partitions = 1 << 60 })},
		{"meta negative limits", meta(func(m *queueMeta) { m.Config.MaxEvents = -1; m.Config.TTL = -1 })},
		{"meta max event bytes 0", meta(func(m *queueMeta) { m.Config.MaxEventBytes = 0 })},
		{"meta group 0 instances", meta(func(m *queueMeta) { m.Groups[0].Instances = 0 })},
		{"meta group negative instances", meta(func(m *queueMeta) { m.Groups[0].Instances = -3 })},
		{"meta group unknown strategy", meta(func(m *queueMeta) { m.Groups[0].Strategy = "lifo" })},
		{"meta group bad name", meta(func(m *queueMeta) { m.Groups[0].Name = "a/b" })},
		{"meta group duplicate", meta(func(m *queueMeta) { m.Groups = append(m.Groups, m.Groups[0]) })},
		{"meta group id 0", meta(func(m *queueMeta) { m.Groups[0].ID = 0 })},
		{"meta group id not below next", meta(func(m *queueMeta) { m.NextGroup = m.Groups[0].ID })},
		{"meta queue id 0", meta(func(m *queueMeta) { m.ID = 0 })},
		{"meta bad queue name", func(t *testing.T, n *generalNode, q *queueRT) {
			rawSet(t, n.db, metaKey("a/\xff"), metaJSON(t, queueMeta{ID: 77, Config: q.cfg, NextGroup: 1}))
		}},
		{"meta empty queue name", func(t *testing.T, n *generalNode, q *queueRT) {
			rawSet(t, n.db, metaKey(""), metaJSON(t, queueMeta{ID: 78, Config: q.cfg, NextGroup: 1}))
		}},
		{"meta queue id shared", func(t *testing.T, n *generalNode, q *queueRT) {
			rawSet(t, n.db, metaKey("twin"), metaJSON(t, queueMeta{ID: q.id, Config: q.cfg, NextGroup: 1}))
		}},
		{"next queue id short", func(t *testing.T, n *generalNode, q *queueRT) { rawSet(t, n.db, []byte(nextIDKey), []byte{1}) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The open backend (what it has in memory stays good; what
			// it reads is garbage), then a new one on a fresh store.
			n, q := corruptNode(t)
			tc.do(t, n, q)
			exercise(t, n)
			n, q = corruptNode(t)
			tc.do(t, n, q)
			if reopen(t, n) {
				exercise(t, n)
			}
		})
	}
}

// A Dequeue of an entry whose value is garbage returns queue.ErrCorrupt
// (and so does a Scan of it): the events are not silently skipped.
func TestCorruptEntryIsAnError(t *testing.T) {
	n, q := corruptNode(t)
	rawSet(t, n.db, firstKey(t, n.db, queuePrefix(q.id)), []byte{valueVersion, 0, 9})
	c, err := n.qs.Consumer("q", "g", 0)
	mustT(t)(err)
	err = queuetest.Step(n.coord, func() error { _, err := c.Dequeue(10); return err }, c)
	if !errors.Is(err, queue.ErrCorrupt) {
		t.Fatalf("Dequeue of a corrupt entry: %v, want queue.ErrCorrupt", err)
	}
	err = n.qs.Scan("q", queue.ScanOptions{}, func(queue.Entry) bool { return true })
	if !errors.Is(err, queue.ErrCorrupt) {
		t.Fatalf("Scan of a corrupt entry: %v, want queue.ErrCorrupt", err)
	}
}
