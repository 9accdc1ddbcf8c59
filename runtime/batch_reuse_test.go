package runtime_test

import (
	"sync"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// t_batch_keep keeps every slice ProcessBatch gets (flowlet.BatchProcessor
// allows it: only payloads are call-scoped); t_batch_borrow is a
// runtime.BatchBorrower and notes the backing array of each slice.
type batchKeep struct{}

var (
	batchMu     sync.Mutex
	keptBatches [][]flowlet.Event
	borrowed    = map[*flowlet.Event]int{}
)

func (batchKeep) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	batchMu.Lock()
	keptBatches = append(keptBatches, evs)
	batchMu.Unlock()
	return nil
}

type batchBorrow struct{}

func (batchBorrow) BorrowsBatch() {}
func (batchBorrow) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	batchMu.Lock()
	borrowed[&evs[:1][0]]++
	batchMu.Unlock()
	return nil
}

var _ runtime.BatchBorrower = batchBorrow{}

func init() {
	flowlet.Register("t_batch_keep", func() flowlet.Flowlet { return batchKeep{} }, flowlet.TypeInfo{Sink: true})
	flowlet.Register("t_batch_borrow", func() flowlet.Flowlet { return batchBorrow{} }, flowlet.TypeInfo{Sink: true})
}

// TestBatchSlices: a batch flowlet that may keep its slices gets a new one
// every step (what it kept is never overwritten); a BatchBorrower gets the
// same slice step after step. The generator commits its 50 events in one
// step, so each flowlet takes them in 5 steps of 10.
func TestBatchSlices(t *testing.T) {
	batchMu.Lock()
	keptBatches, borrowed = nil, map[*flowlet.Event]int{}
	batchMu.Unlock()
	a := runDrain(t, t.TempDir(), `
app: batches
flowlets:
  gen: {type: generator, config: {count: 50, batch: 50}}
  keep: {type: t_batch_keep, batch_size: 10}
  borrow: {type: t_batch_borrow, batch_size: 10}
connections:
  - {from: gen, to: keep}
  - {from: gen, to: borrow}
`, runtime.Options{})
	a.Close()
	batchMu.Lock()
	defer batchMu.Unlock()
	ids := map[string]bool{}
	for _, b := range keptBatches {
		for _, ev := range b {
			ids[ev.ID] = true
		}
	}
	if len(keptBatches) != 5 || len(ids) != 50 {
		t.Errorf("kept %d batches holding %d distinct event ids now, want 5 batches, 50 ids (a kept slice was overwritten)", len(keptBatches), len(ids))
	}
	if len(borrowed) != 1 {
		t.Errorf("the borrowing flowlet got %d different slices in 5 steps, want 1 (reused): %v", len(borrowed), borrowed)
	}
}
