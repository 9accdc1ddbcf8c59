package badgerq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// The backend itself (without queue.Queues' checks) refuses an event that
// can never fit MaxBytes at once, instead of waiting out FullWait.
func TestBackendOversizedEventFailsAtOnce(t *testing.T) {
	e := newEnv(t, true)
	b := e.Queues.Backend()
	must := mustT(t)
	must(b.CreateQueue("q", queue.Config{Partitions: 1, MaxBytes: 10, FullWait: time.Hour, MaxEventBytes: 1 << 20}))
	p, err := b.Producer("q")
	must(err)
	ctx := e.Coord.NewContext(p)
	_, err = ctx.Start(time.Hour)
	must(err)
	defer ctx.Abort(nil)
	res := make(chan error, 1)
	go func() { res <- p.Enqueue(context.Background(), queue.Event{Payload: make([]byte, 11)}) }()
	select {
	case err := <-res:
		if !errors.Is(err, queue.ErrEventTooLarge) {
			t.Fatalf("Enqueue: %v, want ErrEventTooLarge", err)
		}
	case <-time.After(30 * time.Second): // a hang guard only: FullWait is an hour
		t.Fatal("Enqueue of an event larger than MaxBytes still waiting 30 s later")
	}
}
