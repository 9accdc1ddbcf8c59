package queuetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
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
	err = waitErr(t, res)
	if !errors.Is(err, queue.ErrEventTooLarge) || !strings.Contains(err.Error(), "12") || !strings.Contains(err.Error(), "10") {
		t.Fatalf("Enqueue of 12 bytes into MaxBytes 10: %v, want ErrEventTooLarge naming both sizes", err)
	}
	// One that fits exactly still goes in.
	must(t, p.Enqueue(context.Background(), ev("0123456789")))
}
