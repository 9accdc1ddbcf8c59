package badgerq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// A producer's commit moves its events from the reservations to the
// committed depth: it adds them to the depth, then drops the reservation.
// A producer checking for room read the depth first and the reservations
// second, so a commit landing between the two reads was counted in
// neither, and the producer took room that was not there: the queue held
// more than MaxEvents (MaxBytes). The hook commits the first producer at
// that moment.
func TestDepthCheckSeesCommitBetweenLoads(t *testing.T) {
	for _, limit := range []string{"events", "bytes"} {
		t.Run(limit, func(t *testing.T) {
			n := newGeneralNode(t)
			must := mustT(t)
			cfg := queue.Config{Partitions: 1, MaxEvents: 1}
			if limit == "bytes" {
				cfg = queue.Config{Partitions: 1, MaxBytes: 1}
			}
			must(n.qs.CreateQueue("q", cfg))
			pA, err := n.qs.Producer("q")
			must(err)
			ctxA := n.coord.NewContext(pA)
			_, err = ctxA.Start(time.Minute)
			must(err)
			must(pA.Enqueue(context.Background(), queue.Event{Payload: []byte("a")}))

			pB, err := n.qs.Producer("q")
			must(err)
			ctxB := n.coord.NewContext(pB)
			_, err = ctxB.Start(time.Minute)
			must(err)
			calls := 0
			depthTestHook = func() {
				if calls++; calls == 1 {
					must(ctxA.Finish())
				}
			}
			defer func() { depthTestHook = nil }()
			err = pB.Enqueue(context.Background(), queue.Event{Payload: []byte("b")})
			depthTestHook = nil
			if err == nil {
				must(ctxB.Finish())
			} else {
				ctxB.Abort(nil)
			}
			info, ierr := n.qs.Info("q")
			must(ierr)
			if info.Events > 1 || info.Bytes > 1 {
				t.Fatalf("depth %d events / %d bytes with MaxEvents %d, MaxBytes %d", info.Events, info.Bytes, cfg.MaxEvents, cfg.MaxBytes)
			}
			if !errors.Is(err, queue.ErrQueueFull) {
				t.Fatalf("Enqueue into a queue full once the other producer committed: %v, want ErrQueueFull", err)
			}
		})
	}
}
