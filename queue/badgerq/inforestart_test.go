package badgerq

import (
	"context"
	"testing"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// On the general path a consumer's commit stores its new cursor state next
// to the previous one; after a restart the slot is resolved (the newest
// version its snapshot sees picked) only when a consumer next leases it.
// Info read the older version until then: the lag too high and the
// consumed count too low, for good for a group nobody consumes from
// (and in a read-only inspection of the store).
func TestInfoAfterRestartGeneralPath(t *testing.T) {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	p, err := n.qs.Producer("q")
	must(err)
	must(queuetest.Step(n.coord, func() error {
		for range 3 {
			if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte("x")}); err != nil {
				return err
			}
		}
		return nil
	}, p))
	c, err := n.qs.Consumer("q", "g", 0)
	must(err)
	for range 2 { // two commits: the stored value is [second, first]
		must(queuetest.Step(n.coord, func() error { _, err := c.Dequeue(1); return err }, c))
	}
	check := func(when string) {
		t.Helper()
		info, err := n.qs.Info("q")
		must(err)
		if g := info.Groups[0]; g.Lag != 1 || g.Consumed != 2 {
			t.Fatalf("%s: lag %d, consumed %d; want 1 and 2", when, g.Lag, g.Consumed)
		}
	}
	check("before the restart")
	n.restart()
	check("after the restart")
}
