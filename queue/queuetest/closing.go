package queuetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// blockedEnqueue starts a transaction whose Enqueue waits for room in full
// queue q (FullWait an hour) and returns its result channel.
func blockedEnqueue(t *testing.T, e *Env, q string) (<-chan error, func()) {
	t.Helper()
	p, err := e.Queues.Producer(q)
	must(t, err)
	ctx := e.Coord.NewContext(p)
	_, err = ctx.Start(time.Hour)
	must(t, err)
	res := make(chan error, 1)
	go func() { res <- p.Enqueue(context.Background(), ev("blocked")) }()
	return res, func() { ctx.Abort(nil) }
}

// waitFor receives from ch what a blocked Enqueue's goroutine sends once
// it returned; the bound only guards against a hang (FullWait is an hour).
func waitFor[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("Enqueue still blocked 30 s later (FullWait 1 h)")
		var zero T
		return zero
	}
}

// testDeleteWakesBlockedEnqueue: a producer waiting for room in a queue that
// is deleted gets ErrUnknownQueue, not a wait of FullWait.
func testDeleteWakesBlockedEnqueue(t *testing.T, e *Env) {
	must(t, e.Queues.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 1, FullWait: time.Hour}))
	must(t, e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	produce(t, e, "q", "e", 1, 1, nil)
	res, abort := blockedEnqueue(t, e, "q")
	defer abort()
	time.Sleep(20 * time.Millisecond) // let it block (it must return either way)
	must(t, e.Queues.DeleteQueue("q"))
	if err := waitFor(t, res); !errors.Is(err, queue.ErrUnknownQueue) {
		t.Fatalf("blocked Enqueue into a deleted queue: %v, want ErrUnknownQueue", err)
	}
}

// testCloseWakesBlocked: Close ends a producer's wait for room with
// ErrClosed, and producers and consumers used after Close get ErrClosed.
func testCloseWakesBlocked(t *testing.T, e *Env) {
	must(t, e.Queues.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 1, FullWait: time.Hour}))
	must(t, e.Queues.CreateQueue("r", queue.Config{Partitions: 1}))
	for _, q := range []string{"q", "r"} {
		must(t, e.Queues.AddGroup(q, queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	}
	produce(t, e, "q", "e", 1, 1, nil)
	produce(t, e, "r", "e", 1, 1, nil)
	p, err := e.Queues.Producer("r")
	must(t, err)
	c, err := e.Queues.Consumer("r", "g", 0)
	must(t, err)
	res, abort := blockedEnqueue(t, e, "q")
	defer abort()
	time.Sleep(20 * time.Millisecond)
	must(t, e.Queues.Close())
	if err := waitFor(t, res); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("blocked Enqueue at Close: %v, want ErrClosed", err)
	}
	err = Step(e.Coord, func() error { return p.Enqueue(context.Background(), ev("late")) }, p)
	if !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Enqueue after Close: %v, want ErrClosed", err)
	}
	err = Step(e.Coord, func() error { _, err := c.Dequeue(10); return err }, c)
	if !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Dequeue after Close: %v, want ErrClosed", err)
	}
}
