package badgerq

import (
	"fmt"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// A consumer's PostCommit slower than Options.PostCommitWait (a GC pause,
// a stalled goroutine; here a hook that blocks, and the backend's clock
// moved past the wait): a FIFO peer takes the committed but unpublished
// lease over with the committed state from the store and commits what
// follows before the owner's PostCommit runs. The PostCommits then come out
// of commit order (the peer's first), which is what the wait is for; but
// the late PostCommit must publish nothing on the partition taken over,
// whenever it comes: while the peer holds it, or after the peer committed
// (it put the state before the peer's commit back, and b came again).
// Every entry is delivered once.
func TestSlowPostCommitAfterTakeover(t *testing.T) {
	for _, fast := range []bool{true, false} {
		for _, when := range []string{"while_taker_holds", "after_taker_commit"} {
			t.Run(fmt.Sprintf("fast=%v/%s", fast, when), func(t *testing.T) {
				e := newEnv(t, fast, func(o *Options) { o.EvictInterval = -1 })
				must := mustT(t)
				enqueue, owner, peer := ownerAndPeer(t, e)
				reached, release := make(chan struct{}), make(chan struct{})
				var first []queue.Entry
				done := make(chan error, 1)
				slow := queuetest.SlowPostCommit(owner, func() { close(reached); <-release })
				go func() {
					done <- queuetest.Step(e.Coord, func() (err error) { first, err = owner.Dequeue(1); return err }, slow)
				}()
				select {
				case <-reached: // committed; its PostCommit waits
				case err := <-done:
					t.Fatalf("the owner's step ended before its PostCommit: %v", err)
				}
				var got []queue.Entry
				must(queuetest.Step(e.Coord, func() (err error) { got, err = peer.Dequeue(10); return err }, peer))
				if len(got) != 0 {
					t.Fatalf("the peer took the lease over at once (got %d entries): the PostCommit may only be slow", len(got))
				}
				e.Advance(time.Second) // Options.PostCommitWait
				late := func() {
					close(release)
					must(<-done)
				}
				ctx := e.Coord.NewContext(peer)
				_, err := ctx.Start(time.Minute)
				must(err)
				got, err = peer.Dequeue(10)
				must(err)
				expectPayloadsOnce(t, got, "b") // taken over with the committed state
				if when == "while_taker_holds" {
					late()
				}
				must(ctx.Finish())
				if when == "after_taker_commit" {
					late()
				}
				enqueue("c")
				all := append(append(first, got...), queuetest.Drain(t, e, peer, 10)...)
				all = append(all, queuetest.Drain(t, e, owner, 10)...)
				expectPayloadsOnce(t, all, "a", "b", "c")
			})
		}
	}
}
