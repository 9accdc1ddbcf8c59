package badgerq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// TestReusedBuffers: producers recycle their chunk buffers from one
// committed transaction to the next, and consumers copy out only the events
// they deliver (a Dequeue may stop inside a chunk). Every event must still
// come back byte for byte, whether read through Dequeue or through
// DequeueAppend into a slice that already holds entries, after later
// transactions wrote into the recycled buffers, and after a rolled-back one.
func TestReusedBuffers(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			// 2 KiB chunks: several per partition and transaction, and
			// more than the producer keeps for reuse (4 chunks' worth).
			e := newEnv(t, fast, func(o *Options) { o.ChunkBytes = 2 << 10 })
			qs := e.Queues
			if err := qs.CreateQueue("q", queue.Config{Partitions: 2}); err != nil {
				t.Fatal(err)
			}
			if err := qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}); err != nil {
				t.Fatal(err)
			}
			p, err := qs.Producer("q")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{} // payload → key
			payload := func(tx, i int) string { return fmt.Sprintf("tx%d-ev%d-%0*d", tx, i, (tx*7+i)%300, 0) }
			for txn := range 12 {
				ctx := e.Coord.NewContext(p)
				if _, err := ctx.Start(time.Minute); err != nil {
					t.Fatal(err)
				}
				for i := range 200 {
					pl, key := payload(txn, i), fmt.Sprintf("k%d", i%5)
					if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte(pl), Key: []byte(key), TraceID: "t" + key}); err != nil {
						t.Fatal(err)
					}
					if txn != 5 {
						want[pl] = key
					}
				}
				if txn == 5 {
					if err := ctx.Abort(nil); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := ctx.Finish(); err != nil {
					t.Fatal(err)
				}
			}
			c, err := qs.Consumer("q", "g", 0)
			if err != nil {
				t.Fatal(err)
			}
			da, ok := c.(queue.DequeueAppender)
			if !ok {
				t.Fatal("badgerq consumer is not a queue.DequeueAppender")
			}
			got := map[string]bool{}
			check := func(es []queue.Entry) {
				for _, en := range es {
					pl := string(en.Payload)
					key, ok := want[pl]
					switch {
					case !ok:
						t.Fatalf("unexpected payload %q", pl)
					case got[pl]:
						t.Fatalf("payload %q twice", pl)
					case string(en.Key) != key || en.TraceID != "t"+key:
						t.Fatalf("payload %q: key %q trace %q, want %q", pl, en.Key, en.TraceID, key)
					}
					got[pl] = true
				}
			}
			sentinel := queue.Entry{Event: queue.Event{Payload: []byte("sentinel")}}
			var buf []queue.Entry
			for step := 0; len(got) < len(want); step++ {
				if step > 1000 {
					t.Fatalf("%d of %d events after %d steps", len(got), len(want), step)
				}
				ctx := e.Coord.NewContext(c)
				if _, err := ctx.Start(time.Minute); err != nil {
					t.Fatal(err)
				}
				var es []queue.Entry
				if step%2 == 0 {
					es, err = c.Dequeue(7) // stops inside chunks
				} else {
					buf, err = da.DequeueAppend(append(buf[:0], sentinel), 13)
					if len(buf) == 0 || string(buf[0].Payload) != "sentinel" || len(buf) > 14 {
						t.Fatalf("DequeueAppend returned %d entries, first %q", len(buf), buf[0].Payload)
					}
					es = buf[1:]
				}
				if err != nil {
					t.Fatal(err)
				}
				if step%5 == 4 {
					// Aborted: the same entries come again.
					if err := ctx.Abort(nil); err != nil {
						t.Fatal(err)
					}
					continue
				}
				check(es)
				if err := ctx.Finish(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
