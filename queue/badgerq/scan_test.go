package badgerq

import (
	"context"
	"fmt"
	"testing"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// The backend's own Scan (without queue.Queues) reads a partition listed
// twice once.
func TestBackendScanDuplicatePartitions(t *testing.T) {
	e := newEnv(t, true)
	b := e.Queues.Backend()
	must := mustT(t)
	must(e.Queues.CreateQueue("q", queue.Config{Partitions: 2}))
	p, _ := e.Queues.Producer("q")
	must(queuetest.Step(e.Coord, func() error {
		for i := range 10 {
			if err := p.Enqueue(context.Background(), queue.Event{Payload: []byte("x"), Key: []byte(fmt.Sprint(i))}); err != nil {
				return err
			}
		}
		return nil
	}, p))
	n := 0
	must(b.Scan("q", queue.ScanOptions{Partitions: []int{1, 0, 1, 0}}, func(queue.Entry) bool { n++; return true }))
	if n != 10 {
		t.Fatalf("scan of partitions [1 0 1 0]: %d entries, want 10", n)
	}
}
