package queuetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// testOversizedEvent: an event larger than the queue's MaxBytes can never
// fit, even in an empty queue: Enqueue fails at once with ErrEventTooLarge
// naming both sizes, instead of ErrQueueFull after the whole FullWait.
func testOversizedEvent(t *testing.T, e *Env) {
	must(t, e.Queues.CreateQueue("q", queue.Config{Partitions: 1, MaxBytes: 10, FullWait: time.Hour}))
	p, err := e.Queues.Producer("q")
	must(t, err)
	ctx := e.Coord.NewContext(p)
	_, err = ctx.Start(time.Hour)
	must(t, err)
	defer ctx.Abort(nil)
	res := make(chan error, 1)
	go func() { res <- p.Enqueue(context.Background(), ev("0123456789ab")) }()
	err = waitFor(t, res)
	if !errors.Is(err, queue.ErrEventTooLarge) || !strings.Contains(err.Error(), "12") || !strings.Contains(err.Error(), "10") {
		t.Fatalf("Enqueue of 12 bytes into MaxBytes 10: %v, want ErrEventTooLarge naming both sizes", err)
	}
	// One that fits exactly still goes in.
	must(t, p.Enqueue(context.Background(), ev("0123456789")))
}

// testDepthLimitsConcurrent: many producers race for the last room of a
// queue bounded by events or by bytes, some of them aborting. Without
// FullWait a producer that does not fit fails at once; the depth never
// passes the bound, and it is exactly what committed (an abort leaves no
// reservation behind). With FullWait and a consumer making room, every
// producer gets in, the bound holds throughout, and every event is consumed
// once.
func testDepthLimitsConcurrent(t *testing.T, e *Env) {
	const producers = 8
	for _, cfg := range []queue.Config{
		{Partitions: 4, MaxEvents: 25},
		{Partitions: 4, MaxBytes: 100}, // events of 3 and 4 bytes
	} {
		name := fmt.Sprintf("now-%d-%d", cfg.MaxEvents, cfg.MaxBytes)
		must(t, e.Queues.CreateQueue(name, cfg))
		var committed, committedBytes atomic.Int64
		var wg sync.WaitGroup
		for pi := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := e.Queues.Producer(name)
				if err != nil {
					t.Error(err)
					return
				}
				for i := range 30 {
					n, size := 1+(pi+i)%3, int64(0)
					abort := (pi+i)%4 == 0
					err := Step(e.Coord, func() error {
						for j := range n {
							ev := ev(fmt.Sprintf("%d%d", pi%10, j))
							if j%2 == 1 {
								ev.Payload = append(ev.Payload, 'x')
							}
							if err := p.Enqueue(context.Background(), ev); err != nil {
								return err
							}
							size += int64(len(ev.Payload))
						}
						if abort {
							return errChaos
						}
						return nil
					}, p)
					switch {
					case err == nil:
						committed.Add(int64(n))
						committedBytes.Add(size)
					case errors.Is(err, errChaos), errors.Is(err, queue.ErrQueueFull):
					default:
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		info, err := e.Queues.Info(name)
		must(t, err)
		if (cfg.MaxEvents > 0 && info.Events > cfg.MaxEvents) || (cfg.MaxBytes > 0 && info.Bytes > cfg.MaxBytes) {
			t.Fatalf("%s: depth %d events / %d bytes, past the bound (%+v)", name, info.Events, info.Bytes, cfg)
		}
		if info.Events != committed.Load() || info.Bytes != committedBytes.Load() {
			t.Fatalf("%s: depth %d events / %d bytes, but %d / %d committed", name, info.Events, info.Bytes, committed.Load(), committedBytes.Load())
		}
		// Room for one event more is there, or the queue is full: an
		// event that fits goes in (no reservation leaked by the aborts
		// and refusals).
		p, err := e.Queues.Producer(name)
		must(t, err)
		err = Step(e.Coord, func() error { return p.Enqueue(context.Background(), ev("z")) }, p)
		fits := (cfg.MaxEvents == 0 || info.Events+1 <= cfg.MaxEvents) && (cfg.MaxBytes == 0 || info.Bytes+1 <= cfg.MaxBytes)
		if fits != (err == nil) {
			t.Fatalf("%s: one more event at depth %d / %d: %v", name, info.Events, info.Bytes, err)
		}
	}

	// Bounded wait: producers wait for a consumer to make room. One event
	// per transaction: a transaction holds the room of the events it
	// enqueued while it waits for more, so producers of several events
	// each can together hold all the room and wait for each other; the
	// youngest then fails with ErrQueueFull (HoldersWaitForEachOther),
	// which this test counts as an error.
	cfg := queue.Config{Partitions: 4, MaxEvents: 5, MaxBytes: 25, FullWait: time.Minute}
	must(t, e.Queues.CreateQueue("wait", cfg))
	must(t, e.Queues.AddGroup("wait", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 2}))
	const perProducer = 20
	var wg sync.WaitGroup
	for pi := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.Queues.Producer("wait")
			if err != nil {
				t.Error(err)
				return
			}
			err = produceWithAborts(e.Coord, 2*cfg.FullWait, p, perProducer,
				func(int) int { return 1 },
				func(attempt int) bool { return attempt%4 == 1 },
				func(j int) queue.Event { return ev(fmt.Sprintf("w-%d", pi*perProducer+j)) })
			if err != nil {
				t.Error(err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var mu sync.Mutex
	got := map[string]int{}
	var cw sync.WaitGroup
	for i := range 2 {
		cw.Add(1)
		go func() {
			defer cw.Done()
			c, err := e.Queues.Consumer("wait", "g", i)
			if err != nil {
				t.Error(err)
				return
			}
			for step := 0; ; step++ {
				var es []queue.Entry
				err := Step(e.Coord, func() (err error) {
					if es, err = c.Dequeue(3); err != nil {
						return err
					}
					if len(es) > 0 && step%3 == 0 {
						return errChaos // redelivered later
					}
					return nil
				}, c)
				if err == nil {
					mu.Lock()
					for _, en := range es {
						got[string(en.Payload)]++
					}
					n := len(got)
					mu.Unlock()
					if n == producers*perProducer {
						return
					}
				} else if !errors.Is(err, errChaos) {
					t.Error(err)
					return
				}
				info, err := e.Queues.Info("wait")
				if err != nil {
					t.Error(err)
					return
				}
				if info.Events > cfg.MaxEvents || info.Bytes > cfg.MaxBytes {
					t.Errorf("depth %d events / %d bytes, past the bound (%+v)", info.Events, info.Bytes, cfg)
					return
				}
				if t.Failed() {
					return
				}
			}
		}()
	}
	cw.Wait()
	<-done
	expectExactly(t, got, "w", producers*perProducer)
}

// stepFor is Step with a transaction timeout of d: a producer may wait for
// room up to FullWait, and its transaction must outlive the wait (on a
// loaded machine the wait can pass Step's 10 s).
func stepFor(c *tx.Coordinator, d time.Duration, fn func() error, parts ...tx.Participant) error {
	ctx := c.NewContext(parts...)
	if _, err := ctx.Start(d); err != nil {
		return err
	}
	if err := fn(); err != nil {
		return ctx.Abort(err)
	}
	return ctx.Finish()
}

// produceWithAborts enqueues events ev(0) … ev(total-1) through p,
// size(attempt) events per transaction (timeout d), and aborts the
// attempts abort picks (errChaos): their events come again in the next.
// It returns the first other error.
func produceWithAborts(c *tx.Coordinator, d time.Duration, p queue.Producer, total int, size func(attempt int) int, abort func(attempt int) bool, ev func(j int) queue.Event) error {
	for i, attempt := 0, 0; i < total; attempt++ {
		n := min(size(attempt), total-i)
		err := stepFor(c, d, func() error {
			for j := i; j < i+n; j++ {
				if err := p.Enqueue(context.Background(), ev(j)); err != nil {
					return err
				}
			}
			if abort(attempt) {
				return errChaos
			}
			return nil
		}, p)
		switch {
		case errors.Is(err, errChaos):
		case err != nil:
			return err
		default:
			i += n
		}
	}
	return nil
}

// heldProducer is a producer whose transaction (timeout an hour) stays
// open holding the room of the events it enqueued.
type heldProducer struct {
	p   queue.Producer
	ctx *tx.Context
	err error // of the last enqueueAsync
}

// holdRoom starts a producer transaction on q that enqueues n one-byte
// events and stays open.
func holdRoom(t *testing.T, e *Env, q string, n int) *heldProducer {
	t.Helper()
	p, err := e.Queues.Producer(q)
	must(t, err)
	h := &heldProducer{p: p, ctx: e.Coord.NewContext(p)}
	_, err = h.ctx.Start(time.Hour)
	must(t, err)
	for range n {
		must(t, p.Enqueue(context.Background(), ev("h")))
	}
	return h
}

// enqueueAsync enqueues one more one-byte event on its own goroutine and
// sends h to done once Enqueue returned (its error in h.err).
func (h *heldProducer) enqueueAsync(done chan<- *heldProducer) {
	go func() {
		h.err = h.p.Enqueue(context.Background(), ev("w"))
		done <- h
	}()
}

// testHoldersWaitForEachOther: room is reserved event by event, so
// producers of several events can each hold part of the room and all wait
// for more, which only their own ends would free: a deadlock in which every
// one of them waited out FullWait and failed. When every producer holding
// room waits and no eviction could make enough (the room held alone leaves
// none), the youngest gives up at once with ErrQueueFull, and the older
// one gets in once its transaction ends. While eviction of committed
// events can still make room, nobody gives up.
func testHoldersWaitForEachOther(t *testing.T, e *Env) {
	for _, cfg := range []queue.Config{
		{Partitions: 1, MaxEvents: 3, FullWait: time.Hour},
		{Partitions: 1, MaxBytes: 3, FullWait: time.Hour},
	} {
		name := fmt.Sprintf("held-%d-%d", cfg.MaxEvents, cfg.MaxBytes)
		must(t, e.Queues.CreateQueue(name, cfg))
		older := holdRoom(t, e, name, 2)
		younger := holdRoom(t, e, name, 1) // the queue is full
		done := make(chan *heldProducer, 2)
		younger.enqueueAsync(done)
		older.enqueueAsync(done)
		if h := waitFor(t, done); h != younger || !errors.Is(h.err, queue.ErrQueueFull) {
			t.Fatalf("%s: the first Enqueue to return was the %s producer's, with %v; want the younger's, ErrQueueFull",
				name, map[bool]string{true: "younger", false: "older"}[h == younger], h.err)
		}
		must(t, younger.ctx.Abort(nil))
		if h := waitFor(t, done); h.err != nil {
			t.Fatalf("%s: the older producer, once the younger aborted: %v", name, h.err)
		}
		must(t, older.ctx.Finish())
		if info, err := e.Queues.Info(name); err != nil || info.Events != 3 {
			t.Fatalf("%s: depth %d (%v), want the older producer's 3 events", name, info.Events, err)
		}
	}

	// One committed event a consumer will take: its eviction makes room
	// for one waiter, whose commit (consumed and evicted in turn) for the
	// other. Both get in.
	cfg := queue.Config{Partitions: 1, MaxEvents: 3, FullWait: time.Hour}
	must(t, e.Queues.CreateQueue("evictable", cfg))
	must(t, e.Queues.AddGroup("evictable", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	produce(t, e, "evictable", "c", 1, 1, nil)
	a, b := holdRoom(t, e, "evictable", 1), holdRoom(t, e, "evictable", 1)
	done := make(chan *heldProducer, 2)
	a.enqueueAsync(done)
	b.enqueueAsync(done)
	c, err := e.Queues.Consumer("evictable", "g", 0)
	must(t, err)
	for range 2 {
		Drain(t, e, c, 10)
		must(t, e.Queues.Maintain())
		h := waitFor(t, done)
		if h.err != nil {
			t.Fatalf("a producer waiting while a committed event could still be evicted: %v", h.err)
		}
		must(t, h.ctx.Finish())
	}
	Drain(t, e, c, 10)
	must(t, e.Queues.Maintain())
	if info, err := e.Queues.Info("evictable"); err != nil || info.Events != 0 {
		t.Fatalf("depth %d (%v) after everything was consumed and evicted", info.Events, err)
	}
}
