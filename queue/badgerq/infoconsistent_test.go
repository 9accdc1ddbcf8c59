package badgerq

import (
	"context"
	"fmt"
	"testing"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// heldPostCommit is a participant with nothing to write whose PostCommit
// waits for release, holding the participants after it (here the
// producer) between the commit and their PostCommit.
type heldPostCommit struct {
	store            any
	reached, release chan struct{}
}

func (h *heldPostCommit) StartTx(*tx.Tx) error                     { return nil }
func (h *heldPostCommit) UpdateTx(*tx.Tx) error                    { return nil }
func (h *heldPostCommit) ChangeKeys() [][]byte                     { return nil }
func (h *heldPostCommit) Persist() error                           { return nil }
func (h *heldPostCommit) Rollback() error                          { return nil }
func (h *heldPostCommit) Store() any                               { return h.store }
func (h *heldPostCommit) Stage(dst []tx.Write) ([]tx.Write, error) { return dst, nil }
func (h *heldPostCommit) PostCommit()                              { close(h.reached); <-h.release }

// Info is read while a producer's commit is visible and its PostCommit,
// which adds its events to the depth counter, has not run: a group's lag
// (counted from the stored keys) was above the queue's events (0 events,
// lag 1: a user polling the queues saw it), and once a consumer read the
// entry and an eviction pass deleted it (taking it from the counter) the
// depth was -1. Info now counts the depth from the same read as the lag:
// lag never above events, events never below 0. The committed entry stays
// in the lag before the PostCommit on the general path too (persisted,
// its registration not ended yet): a drain check reads a lag of 0 as
// nothing left to consume.
func TestInfoLagNotAboveEvents(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			b, e := newBackendEnv(t, fast, false, func(o *Options) { o.EvictInterval = -1 })
			must := mustT(t)
			must(e.Queues.CreateQueue("q", queue.Config{Partitions: 1}))
			must(e.Queues.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
			p, err := e.Queues.Producer("q")
			must(err)
			held := &heldPostCommit{store: b.DB(), reached: make(chan struct{}), release: make(chan struct{})}
			done := make(chan error, 1)
			go func() {
				done <- queuetest.Step(e.Coord, func() error {
					return p.Enqueue(context.Background(), queue.Event{Payload: []byte("a")})
				}, held, p)
			}()
			select {
			case <-held.reached: // committed; the producer's PostCommit waits
			case err := <-done:
				t.Fatalf("the step ended before its PostCommit: %v", err)
			}
			check := func(when string, wantLag int64) {
				t.Helper()
				info, err := e.Queues.Info("q")
				must(err)
				if lag := info.Groups[0].Lag; info.Events < 0 || info.Bytes < 0 || lag > info.Events || wantLag >= 0 && lag != wantLag {
					t.Fatalf("%s: %d events, %d bytes, lag %d (want lag %d, at most the events)", when, info.Events, info.Bytes, lag, wantLag)
				}
			}
			check("committed, before PostCommit", 1)
			c, err := e.Queues.Consumer("q", "g", 0)
			must(err)
			var got []queue.Entry
			must(queuetest.Step(e.Coord, func() (err error) { got, err = c.Dequeue(10); return err }, c))
			must(b.evict())
			check("consumed and evicted, before PostCommit", 0)
			close(held.release)
			must(<-done)
			check("after PostCommit", 0)
			if info, _ := e.Queues.Info("q"); fast && (len(got) != 1 || info.Events != 0) {
				t.Fatalf("got %d entries, %d events left", len(got), info.Events)
			}
		})
	}
}
