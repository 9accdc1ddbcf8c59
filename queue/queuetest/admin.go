package queuetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// testAdminWhileConsuming: while producers commit keyed events (a key's
// events at one priority) and instances of group g dequeue, commit and
// abort, the group is rescaled up and down (instance numbers above the new
// count stop with ErrUnknownInstance; they come back when it grows again),
// its strategy changes, and another group is added and removed again and
// again (its consumers stop with ErrUnknownGroup). g consumes every
// committed event exactly once, and a key's events in their order; the
// queue ends empty for g.
func testAdminWhileConsuming(t *testing.T, e *Env) {
	const keys, perKey, maxInst = 13, 40, 4
	must(t, e.Queues.CreateQueue("q", queue.Config{Partitions: 8}))
	must(t, e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 2}))

	var mu sync.Mutex
	var log []queue.Entry
	var produced sync.WaitGroup
	var producing atomic.Bool
	producing.Store(true)
	produced.Add(1)
	go func() {
		defer produced.Done()
		defer producing.Store(false)
		p, err := e.Queues.Producer("q")
		if err != nil {
			t.Error(err)
			return
		}
		err = produceWithAborts(e.Coord, 10*time.Second, p, keys*perKey,
			func(attempt int) int { return 1 + attempt%5 },
			func(attempt int) bool { return attempt%4 == 3 },
			func(j int) queue.Event {
				k := j % keys
				return queue.Event{Payload: fmt.Appendf(nil, "e-%d", j), Key: []byte{byte(k)}, Priority: uint8(k % 3)}
			})
		if err != nil {
			t.Error(err)
		}
	}()

	stop := make(chan struct{})
	var consumers sync.WaitGroup
	var total atomic.Int64
	// run is one instance of group; it stops when told, or when its group
	// or instance number is gone.
	run := func(group string, i int, record bool) {
		defer consumers.Done()
		c, err := e.Queues.Consumer("q", group, i)
		if err != nil {
			return // scaled down or removed meanwhile
		}
		r := &recorder{mu: &mu, log: &log}
		parts := []tx.Participant{c}
		if record {
			parts = []tx.Participant{r, c}
		}
		for step := 0; ; step++ {
			select {
			case <-stop:
				return
			default:
			}
			err := Step(e.Coord, func() error {
				got, err := c.Dequeue(1 + step%6)
				r.pending = append(r.pending, got...)
				if err == nil && len(got) > 0 && step%3 == 1 {
					return errChaos // the same events come again, in order
				}
				return err
			}, parts...)
			switch {
			case err == nil, errors.Is(err, errChaos), errors.Is(err, tx.ErrConflict):
			case errors.Is(err, queue.ErrUnknownInstance), errors.Is(err, queue.ErrUnknownGroup):
				return
			default:
				t.Error(err)
				return
			}
			if record && err == nil {
				total.Add(int64(len(r.pending)))
			}
		}
	}
	start := func(group string, n int, record bool) {
		for i := range n {
			consumers.Add(1)
			go run(group, i, record)
		}
	}
	start("g", maxInst, true) // instances 2 and 3 stop at once or later
	admin := []func() error{
		func() error { return e.Queues.Rescale("q", "g", 4) },
		func() error {
			return e.Queues.AddGroup("q", queue.Group{Name: "x", Strategy: queue.FIFO, Instances: 2})
		},
		func() error { start("x", 2, false); return nil },
		func() error { return e.Queues.SetStrategy("q", "g", queue.FIFO) },
		func() error { return e.Queues.Rescale("q", "g", 1) },
		func() error { return e.Queues.RemoveGroup("q", "x") },
		func() error { return e.Queues.SetStrategy("q", "g", queue.RoundRobin) },
		func() error { return e.Queues.Rescale("q", "g", 3) },
		func() error {
			return e.Queues.AddGroup("q", queue.Group{Name: "x", Strategy: queue.Hash, Instances: 3})
		},
		func() error { start("x", 3, false); return nil },
		func() error { return e.Queues.SetStrategy("q", "g", queue.Hash) },
		func() error { return e.Queues.Rescale("q", "g", 2) },
		func() error { return e.Queues.RemoveGroup("q", "x") },
	}
	// Each change waits for g to have committed something since the last
	// one, so that it lands while consumers run.
	for _, change := range admin {
		seen := total.Load()
		for total.Load() == seen && producing.Load() {
			if err := waitCommit(e); err != nil {
				t.Fatal(err)
			}
		}
		must(t, change())
		start("g", maxInst, true) // the instance numbers a rescale gave back

	}
	produced.Wait()
	start("g", maxInst, true)
	for total.Load() < keys*perKey && !t.Failed() {
		if err := waitCommit(e); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	consumers.Wait()
	mu.Lock()
	defer mu.Unlock()
	expectExactly(t, payloads(log), "e", keys*perKey)
	expectKeyOrder(t, log)
	info, err := e.Queues.Info("q")
	must(t, err)
	for _, g := range info.Groups {
		if g.Name == "g" && (g.Lag != 0 || g.Consumed != keys*perKey) {
			t.Fatalf("group g: lag %d, consumed %d; want 0 and %d", g.Lag, g.Consumed, keys*perKey)
		}
	}
}

// waitCommit lets other goroutines run: one empty transaction.
func waitCommit(e *Env) error { return Step(e.Coord, func() error { return nil }) }

// testPrioritiesAfterAbort: aborted consumers — partial reads of a level,
// reads across levels, a rescale and a strategy change in between — give
// the same events back in the same order: within a partition, priority
// first, then commit order.
func testPrioritiesAfterAbort(t *testing.T, e *Env) {
	must(t, e.Queues.CreateQueue("q", queue.Config{Partitions: 1}))
	must(t, e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}))
	p, _ := e.Queues.Producer("q")
	batches := [][]uint8{{0, 5, 1, 5, 9, 3, 9}, {7, 0, 2, 9}, {1, 1, 8}}
	var want []string
	byPrio := map[uint8][]string{}
	for bi, b := range batches {
		must(t, Step(e.Coord, func() error {
			for i, pr := range b {
				s := fmt.Sprintf("%d.%d", bi, i)
				byPrio[pr] = append(byPrio[pr], s)
				if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte(s), Priority: pr}); err != nil {
					return err
				}
			}
			return nil
		}, p))
	}
	for pr := 255; pr >= 0; pr-- {
		for _, s := range byPrio[uint8(pr)] {
			want = append(want, fmt.Sprintf("%d:%s", pr, s))
		}
	}
	c0, _ := e.Queues.Consumer("q", "g", 0)
	var got []string
	step := func(c queue.Consumer, n int, abort bool) {
		t.Helper()
		var es []queue.Entry
		err := Step(e.Coord, func() (err error) {
			if es, err = c.Dequeue(n); err != nil {
				return err
			}
			if len(es) > 0 {
				// Again in the same transaction: it continues where the
				// first stopped.
				more, err := c.Dequeue(1)
				if err != nil {
					return err
				}
				es = append(es, more...)
			}
			if abort {
				return errChaos
			}
			return nil
		}, c)
		if abort {
			if !errors.Is(err, errChaos) {
				t.Fatal(err)
			}
			return
		}
		must(t, err)
		for _, en := range es {
			got = append(got, fmt.Sprintf("%d:%s", en.Priority, en.Payload))
		}
	}
	step(c0, 1, true)
	step(c0, 4, true)
	step(c0, 2, false)
	step(c0, 3, true)
	must(t, e.Queues.Rescale("q", "g", 3))
	step(c0, 1, false)
	step(c0, 6, true)
	must(t, e.Queues.SetStrategy("q", "g", queue.FIFO))
	c2, _ := e.Queues.Consumer("q", "g", 2)
	step(c2, 2, true)
	step(c2, 2, false)
	must(t, e.Queues.SetStrategy("q", "g", queue.Hash))
	must(t, e.Queues.Rescale("q", "g", 1))
	step(c0, 5, true)
	for range 10 {
		step(c0, 2, false)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order after aborts\n got %v\nwant %v", got, want)
	}
}
