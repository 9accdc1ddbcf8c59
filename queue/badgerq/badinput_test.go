package badgerq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// dbSnapshot returns every stored key and value.
func dbSnapshot(t *testing.T, db *badger.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			out[string(it.Item().Key())] = string(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Bad names and arguments — empty, over-long, path-like, non-UTF-8, with
// the key layout's own bytes, unknown queues, groups and instances,
// configurations out of range, negative counts — come back as typed errors
// and write nothing: the raw store is the same key for key.
func TestBadInputWritesNothing(t *testing.T) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 2, MaxEventBytes: 10, MaxBytes: 20}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 2}))
	p, _ := n.qs.Producer("q")
	must(queuetest.Step(n.coord, func() error {
		return p.Enqueue(context.Background(), queue.Event{Payload: []byte("a")})
	}, p))
	before := dbSnapshot(t, n.db)

	typed := []error{queue.ErrBadName, queue.ErrBadConfig, queue.ErrExists, queue.ErrUnknownQueue, queue.ErrUnknownGroup,
		queue.ErrUnknownInstance, queue.ErrEventTooLarge, queue.ErrQueueFull}
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		for _, s := range typed {
			if errors.Is(err, s) {
				return
			}
		}
		t.Errorf("%s: untyped error %v", what, err)
	}
	names := []string{"", strings.Repeat("a", queue.MaxNameLen+1), "a/b", "/a", "..", "../q", ".q", "-q", `a\b`, "a b", "a\x00b",
		"q\xff", "\xff\xfe", "é", "qm\x00", "q\x00", "\x00tx/x", "a:b", "q\n", "a%2fb"}
	for _, name := range names {
		check("CreateQueue "+name, n.qs.CreateQueue(name, queue.Config{}))
		check("DeleteQueue "+name, n.qs.DeleteQueue(name))
		check("TruncateQueue "+name, n.qs.TruncateQueue(name))
		check("AddGroup to "+name, n.qs.AddGroup(name, queue.Group{Name: "h", Strategy: queue.FIFO, Instances: 1}))
		check("AddGroup "+name, n.qs.AddGroup("q", queue.Group{Name: name, Strategy: queue.FIFO, Instances: 1}))
		check("RemoveGroup "+name, n.qs.RemoveGroup("q", name))
		check("RemoveGroup of "+name, n.qs.RemoveGroup(name, "g"))
		check("Rescale "+name, n.qs.Rescale("q", name, 1))
		check("SetStrategy "+name, n.qs.SetStrategy("q", name, queue.FIFO))
		_, err := n.qs.Info(name)
		check("Info "+name, err)
		_, err = n.qs.Producer(name)
		check("Producer "+name, err)
		_, err = n.qs.Consumer(name, "g", 0)
		check("Consumer of "+name, err)
		_, err = n.qs.Consumer("q", name, 0)
		check("Consumer "+name, err)
		check("Scan "+name, n.qs.Scan(name, queue.ScanOptions{}, func(queue.Entry) bool { return true }))
	}
	for _, cfg := range []queue.Config{{Partitions: -1}, {Partitions: queue.MaxPartitions + 1}, {TTL: -1}, {MaxEvents: -1},
		{MaxBytes: -1}, {FullWait: -time.Second}, {MaxEventBytes: -1}} {
		check("CreateQueue config", n.qs.CreateQueue("q2", cfg))
	}
	check("CreateQueue existing", n.qs.CreateQueue("q", queue.Config{}))
	for _, g := range []queue.Group{{Name: "h", Strategy: "lifo", Instances: 1}, {Name: "h", Strategy: "", Instances: 1},
		{Name: "h", Strategy: queue.FIFO, Instances: 0}, {Name: "h", Strategy: queue.FIFO, Instances: -1},
		{Name: "h", Strategy: queue.FIFO, Instances: queue.MaxInstances + 1}, {Name: "g", Strategy: queue.FIFO, Instances: 1}} {
		check("AddGroup config", n.qs.AddGroup("q", g))
	}
	check("AddGroup to unknown queue", n.qs.AddGroup("nope", queue.Group{Name: "h", Strategy: queue.FIFO, Instances: 1}))
	check("RemoveGroup unknown", n.qs.RemoveGroup("q", "h"))
	check("RemoveGroup of unknown queue", n.qs.RemoveGroup("nope", "g"))
	for _, i := range []int{0, -1, queue.MaxInstances + 1} {
		check("Rescale", n.qs.Rescale("q", "g", i))
	}
	check("Rescale unknown group", n.qs.Rescale("q", "h", 1))
	check("SetStrategy", n.qs.SetStrategy("q", "g", "lifo"))
	check("SetStrategy unknown group", n.qs.SetStrategy("q", "h", queue.FIFO))
	check("DeleteQueue unknown", n.qs.DeleteQueue("nope"))
	check("TruncateQueue unknown", n.qs.TruncateQueue("nope"))
	for _, i := range []int{-1, 2, 1 << 40} {
		_, err := n.qs.Consumer("q", "g", i)
		check("Consumer instance", err)
	}
	check("Scan partition", n.qs.Scan("q", queue.ScanOptions{Partitions: []int{0, 2}}, func(queue.Entry) bool { return true }))
	check("Scan partition", n.qs.Scan("q", queue.ScanOptions{Partitions: []int{-1}}, func(queue.Entry) bool { return true }))
	check("Scan limit", n.qs.Scan("q", queue.ScanOptions{Limit: -1}, func(queue.Entry) bool { return true }))
	check("backend Scan limit", n.b.Scan("q", queue.ScanOptions{Limit: -1}, func(queue.Entry) bool { return true }))
	// The backend's own Scan too: a partition past 65535 wrapped to another
	// one, whose entries came back under the number asked for.
	for _, part := range []int{-1, 2, 1<<16 + 1} {
		check("backend Scan partition", n.b.Scan("q", queue.ScanOptions{Partitions: []int{part}}, func(queue.Entry) bool { return true }))
	}
	c, _ := n.qs.Consumer("q", "g", 0)
	ctx := n.coord.NewContext(p, c)
	_, err := ctx.Start(time.Minute)
	must(err)
	check("Enqueue too large", p.Enqueue(context.Background(), queue.Event{Payload: make([]byte, 11)}))
	check("Enqueue too large key", p.Enqueue(context.Background(), queue.Event{Payload: []byte("a"), Key: make([]byte, 10)}))
	_, err = c.Dequeue(-1)
	check("Dequeue -1", err)
	must(ctx.Finish()) // commits nothing: nothing was enqueued or dequeued

	if after := dbSnapshot(t, n.db); len(after) != len(before) {
		t.Fatalf("bad input changed the store: %d keys, %d before", len(after), len(before))
	} else {
		for k, v := range before {
			if after[k] != v {
				t.Fatalf("bad input changed key %q", k)
			}
		}
	}
	if l, err := n.qs.List(); err != nil || len(l) != 1 || len(l[0].Groups) != 1 || l[0].Groups[0].Instances != 2 || l[0].Groups[0].Strategy != queue.Hash {
		t.Fatalf("after bad input: %+v, %v", l, err)
	}
}
