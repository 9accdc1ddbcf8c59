package badgerq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// A producer waiting for room that wakes (or starts) while Close or
// DeleteQueue runs must not go back to sleep on a channel nobody closes:
// the flag and the wake-up are checked together. The hook runs Close or
// DeleteQueue at the worst moment: after the waiter's last look at the flags
// (before the fix), before it takes the channel to wait on.
func TestReserveSeesCloseAtWakeup(t *testing.T) {
	for _, mode := range []string{"close", "delete"} {
		t.Run(mode, func(t *testing.T) {
			n := newGeneralNode(t)
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			// FullWait only bounds a failure; the outcome is the error.
			must(n.qs.CreateQueue("q", queue.Config{Partitions: 1, MaxEvents: 1, FullWait: 3 * time.Second}))
			p, err := n.qs.Producer("q")
			must(err)
			ctx := n.coord.NewContext(p)
			_, err = ctx.Start(time.Minute)
			must(err)
			must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("a")}))
			must(ctx.Finish())

			_, err = ctx.Start(time.Minute)
			must(err)
			defer ctx.Abort(nil)
			calls := 0
			reserveTestHook = func() {
				calls++
				if calls == 1 {
					if mode == "close" {
						must(n.b.Close())
					} else {
						must(n.b.DeleteQueue("q"))
					}
				}
			}
			defer func() { reserveTestHook = nil }()
			err = p.Enqueue(context.Background(), queue.Event{Payload: []byte("b")})
			want := queue.ErrClosed
			if mode == "delete" {
				want = queue.ErrUnknownQueue
			}
			if !errors.Is(err, want) {
				t.Fatalf("Enqueue into a full queue, %s at its wake-up: %v, want %v", mode, err, want)
			}
		})
	}
}
