package badgerq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

func mustT(t testing.TB) func(error) {
	return func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// An eviction pass and a truncate that delete the same entries at once
// must count them once: the depth is what limits producers.
func TestTruncateDuringEvictionCountsOnce(t *testing.T) {
	e := newEnv(t, true, func(o *Options) { o.EvictInterval = -1 })
	be := e.Queues.Backend().(*Backend)
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 16}))
	must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	p, _ := e.Queues.Producer("q")
	c, _ := e.Queues.Consumer("q", "g", 0)
	for round := range 40 {
		for range 20 {
			must(queuetest.Step(e.Coord, func() error {
				for i := range 16 {
					if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte("x"), Key: []byte(fmt.Sprint(i))}); err != nil {
						return err
					}
				}
				return nil
			}, p))
		}
		for {
			var got []queue.Entry
			must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(1000); return err }, c))
			if len(got) == 0 {
				break
			}
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); must(be.evict()) }()
		go func() { defer wg.Done(); must(e.Queues.TruncateQueue("q")) }()
		wg.Wait()
		if info, _ := e.Queues.Info("q"); info.Events != 0 || info.Bytes != 0 {
			t.Fatalf("round %d: depth %d events, %d bytes with nothing stored", round, info.Events, info.Bytes)
		}
		// Info counts the stored keys (f02ae8f): a double count shows in
		// the counter the limits bound only.
		checkDepthStored(t, be, "q", 0, fmt.Sprintf("round %d", round))
	}
}

// Consumers whose transactions start well before they dequeue (so their
// snapshots are older than their peers' commits), several Dequeues per
// transaction, random aborts, rescales and strategy changes: every committed
// event is consumed exactly once per group, and a key's events (per
// priority) in commit order.
func TestStaleSnapshotConsumersExactlyOnce(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprint("fast=", fast), func(t *testing.T) { staleSnapshotRun(t, fast) })
	}
}

func staleSnapshotRun(t *testing.T, fast bool) {
	e := newEnv(t, fast)
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 4}))
	groups := []queue.Group{{Name: "f", Strategy: queue.FIFO, Instances: 3}, {Name: "h", Strategy: queue.Hash, Instances: 2}}
	for _, g := range groups {
		must(e.Queues.AddGroup("q", g))
	}
	const producers, perProducer = 3, 300
	var pw sync.WaitGroup
	for pi := range producers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			rng := rand.New(rand.NewPCG(uint64(pi), 1))
			p, _ := e.Queues.Producer("q")
			for i := 0; i < perProducer; {
				n := min(1+rng.IntN(8), perProducer-i)
				abort := rng.IntN(5) == 0
				err := queuetest.Step(e.Coord, func() error {
					for j := range n {
						k := rng.IntN(6)
						ev := queue.Event{Payload: []byte(fmt.Sprintf("%d-%d-%d", pi, i+j, k)), Key: []byte(fmt.Sprint(pi, "/", k)), Priority: uint8(k % 2)}
						if err := p.Enqueue(context.Background(), ev); err != nil {
							return err
						}
						if rng.IntN(3) == 0 {
							runtime.Gosched()
						}
					}
					if abort {
						return errAbort
					}
					return nil
				}, p)
				if abort {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				i += n
			}
		}()
	}
	total := producers * perProducer
	var mu sync.Mutex
	logs := map[string][]queue.Entry{}
	var cw sync.WaitGroup
	stop := make(chan struct{})
	for gi, g := range groups {
		for i := range 4 {
			cw.Add(1)
			go func() {
				defer cw.Done()
				rng := rand.New(rand.NewPCG(uint64(gi), uint64(i)))
				var c queue.Consumer
				for {
					select {
					case <-stop:
						return
					default:
					}
					if c == nil {
						var err error
						if c, err = e.Queues.Consumer("q", g.Name, i); err != nil {
							runtime.Gosched()
							continue
						}
					}
					r := &entryLog{mu: &mu, log: logs, group: g.Name}
					ctx := e.Coord.NewContext(r, c)
					if _, err := ctx.Start(time.Minute); err != nil {
						t.Error(err)
						return
					}
					for range rng.IntN(20) {
						runtime.Gosched()
					}
					var err error
					for range 1 + rng.IntN(2) {
						var got []queue.Entry
						if got, err = c.Dequeue(1 + rng.IntN(5)); err != nil {
							break
						}
						r.pending = append(r.pending, got...)
						runtime.Gosched()
					}
					if err != nil || rng.IntN(6) == 0 {
						ctx.Abort(err)
						if errors.Is(err, queue.ErrUnknownInstance) {
							c = nil
						} else if err != nil {
							t.Error(err)
							return
						}
						continue
					}
					if err := ctx.Finish(); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	// Reassign the hash group while everything runs.
	rng := rand.New(rand.NewPCG(9, 9))
	strategies := []queue.Strategy{queue.Hash, queue.RoundRobin, queue.FIFO}
	for range 30 {
		time.Sleep(2 * time.Millisecond)
		if rng.IntN(2) == 0 {
			must(e.Queues.Rescale("q", "h", 1+rng.IntN(4)))
		} else {
			must(e.Queues.SetStrategy("q", "h", strategies[rng.IntN(3)]))
		}
	}
	must(e.Queues.Rescale("q", "h", 4))
	pw.Wait()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(logs["f"]) + len(logs["h"])
		mu.Unlock()
		if n >= 2*total || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	cw.Wait()
	for _, g := range groups {
		seen := map[string]int{}
		last := map[string]int{}
		for _, en := range logs[g.Name] {
			seen[string(en.Payload)]++
			var pi, n, k int
			fmt.Sscanf(string(en.Payload), "%d-%d-%d", &pi, &n, &k)
			key := fmt.Sprint(pi, "/", k)
			if prev, ok := last[key]; ok && n < prev {
				t.Errorf("group %s key %s: event %d after %d", g.Name, key, n, prev)
			}
			last[key] = n
		}
		dups := 0
		for s, n := range seen {
			if n != 1 {
				dups++
				if dups < 5 {
					t.Errorf("group %s: %s consumed %d times", g.Name, s, n)
				}
			}
		}
		if len(seen) != total {
			t.Errorf("group %s: %d distinct events consumed, want %d", g.Name, len(seen), total)
		}
	}
}

var errAbort = errors.New("abort")

// entryLog records the entries of committed transactions in commit order
// (placed before the consumer: its PostCommit runs while the consumer still
// holds its partitions).
type entryLog struct {
	mu      *sync.Mutex
	log     map[string][]queue.Entry
	group   string
	pending []queue.Entry
}

func (r *entryLog) StartTx(*tx.Tx) error  { r.pending = r.pending[:0]; return nil }
func (r *entryLog) UpdateTx(*tx.Tx) error { return nil }
func (r *entryLog) ChangeKeys() [][]byte  { return nil }
func (r *entryLog) Persist() error        { return nil }
func (r *entryLog) Rollback() error       { r.pending = r.pending[:0]; return nil }
func (r *entryLog) PostCommit() {
	r.mu.Lock()
	r.log[r.group] = append(r.log[r.group], r.pending...)
	r.mu.Unlock()
}

// Scan's Since and Until bound the enqueue time, which is stored in
// milliseconds: an event enqueued at exactly Since (or Until) is in the
// range whatever the sub-millisecond part of the bound.
func TestScanTimeBoundsInclusive(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000).Add(600 * time.Microsecond)
	e := newEnv(t, true, func(o *Options) { o.Now = func() time.Time { return now } })
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1}))
	p, _ := e.Queues.Producer("q")
	must(queuetest.Step(e.Coord, func() error { return p.Enqueue(context.Background(), queue.Event{Payload: []byte("x")}) }, p))
	for _, opts := range []queue.ScanOptions{{Since: now}, {Until: now}, {Since: now, Until: now}} {
		n := 0
		must(e.Queues.Scan("q", opts, func(queue.Entry) bool { n++; return true }))
		if n != 1 {
			t.Errorf("scan since %v until %v: %d entries, want the one enqueued at %v", opts.Since, opts.Until, n, now)
		}
	}
	n := 0
	must(e.Queues.Scan("q", queue.ScanOptions{Since: now.Add(time.Millisecond)}, func(queue.Entry) bool { n++; return true }))
	if n != 0 {
		t.Errorf("scan since a millisecond later: %d entries", n)
	}
}

// A Dequeue with a huge max (a caller asking for everything there is) gets
// everything, as does DequeueAppend onto a non-empty slice.
func TestDequeueHugeMax(t *testing.T) {
	e := newEnv(t, true)
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1}))
	must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	p, _ := e.Queues.Producer("q")
	c, _ := e.Queues.Consumer("q", "g", 0)
	produce := func() {
		must(queuetest.Step(e.Coord, func() error {
			for range 3 {
				if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte("x")}); err != nil {
					return err
				}
			}
			return nil
		}, p))
	}
	produce()
	var got []queue.Entry
	must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(1 << 32); return err }, c))
	if len(got) != 3 {
		t.Fatalf("Dequeue(1<<32) got %d entries, want 3", len(got))
	}
	produce()
	dst := []queue.Entry{{}}
	must(queuetest.Step(e.Coord, func() (err error) {
		dst, err = c.(queue.DequeueAppender).DequeueAppend(dst, math.MaxInt)
		return err
	}, c))
	if len(dst) != 4 {
		t.Fatalf("DequeueAppend(one entry, MaxInt) returned %d entries, want 4", len(dst))
	}
}

// A producer handed a new transaction while the previous one never ended
// (no PostCommit, no Rollback: abandoned, or a commit whose outcome is
// unknown) drops that one's events: their reservation against the depth
// limit must go too, or the queue stays full for good.
func TestProducerNewTxReleasesReservation(t *testing.T) {
	e := newEnv(t, true)
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 2}))
	p, _ := e.Queues.Producer("q")
	// A Context refuses Start while its transaction is open (tx.ErrMisuse):
	// each transaction gets a Context of its own, and the producer is
	// handed the next one while the previous is still open.
	var ctxs []*tx.Context
	for range 3 {
		ctx := e.Coord.NewContext(p)
		_, err := ctx.Start(time.Minute)
		must(err)
		ctxs = append(ctxs, ctx)
		for range 2 {
			must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("x")}))
		}
	}
	must(ctxs[2].Finish())
	if info, _ := e.Queues.Info("q"); info.Events != 2 {
		t.Fatalf("depth %d, want 2", info.Events)
	}
	for _, ctx := range ctxs[:2] {
		_ = ctx.Abort(nil)
	}
}

// On the general path a producer's entries are persisted before its commit:
// a truncate in between must not delete them (they commit after it).
func TestTruncateKeepsInFlightGeneralPath(t *testing.T) {
	e := newEnv(t, false)
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1}))
	must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	p, _ := e.Queues.Producer("q")
	must(queuetest.Step(e.Coord, func() error { return p.Enqueue(context.Background(), queue.Event{Payload: []byte("before")}) }, p))
	txn, err := e.Coord.StartShort(time.Minute)
	must(err)
	must(p.StartTx(txn))
	must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("after")}))
	must(e.Coord.CanCommit(txn, p.ChangeKeys()))
	must(p.Persist())
	must(e.Queues.TruncateQueue("q"))
	must(e.Coord.Commit(txn))
	p.PostCommit()
	c, _ := e.Queues.Consumer("q", "g", 0)
	var got []queue.Entry
	must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
	if len(got) != 1 || string(got[0].Payload) != "after" {
		t.Fatalf("after truncate and a later commit got %v, want the event committed after the truncate", got)
	}
	if info, _ := e.Queues.Info("q"); info.Events != 1 {
		t.Fatalf("depth %d, want 1", info.Events)
	}
}

// Event times are headers carried unchanged, also outside the range of
// int64 nanoseconds since 1970 (years before 1678 or after 2262, e.g. a
// "never" sentinel).
func TestEventTimeRoundTrip(t *testing.T) {
	times := []time.Time{
		time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC),
		time.Date(3000, 1, 1, 0, 0, 0, 5, time.UTC),
		time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(-1, 1),
	}
	for _, want := range times {
		v := appendEvent([]byte{valueVersion}, &queue.Event{Payload: []byte("p"), EventTime: want, TraceID: "t"})
		r, err := newEventReader(v)
		if err != nil {
			t.Fatal(err)
		}
		var got queue.Event
		if err := r.next(&got); err != nil {
			t.Fatal(err)
		}
		if !got.EventTime.Equal(want) || got.TraceID != "t" || string(got.Payload) != "p" {
			t.Errorf("event time %v came back as %v (%+v)", want, got.EventTime, got)
		}
	}
}
