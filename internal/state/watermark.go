package state

import (
	"slices"
	"sync"

	"github.com/flowrun/flowrun/tx"
)

// Watermark computes GC bounds that are safe while transactions run.
//
// A version below a transaction's FirstInProgress is settled, but an older
// transaction still running may not see it (it committed after that one
// started), so GC must not let a newer version shadow an older one that such
// a transaction still reads. Watermark takes the coordinator's visibility
// upper bound as a candidate, remembers the transactions in progress at that
// moment, and hands the candidate out only once all of them have finished:
// from then on every transaction in progress started after every version
// below the candidate had settled, so it sees every committed one.
//
// Call Advance periodically (before each GC pass); it never blocks.
type Watermark struct {
	c *tx.Coordinator

	mu      sync.Mutex
	safe    uint64
	cand    uint64
	waitFor []uint64 // in progress when cand was taken, sorted
}

// NewWatermark returns a Watermark over c.
func NewWatermark(c *tx.Coordinator) *Watermark { return &Watermark{c: c} }

// Advance returns the newest safe bound (0 until one is known). Bounds never
// go backwards.
func (w *Watermark) Advance() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cand != 0 {
		live := w.c.InProgress()
		done := true
		for _, id := range w.waitFor {
			if _, ok := slices.BinarySearch(live, id); ok {
				done = false
				break
			}
		}
		if !done {
			return w.safe
		}
		w.safe = max(w.safe, w.cand)
		w.cand = 0
	}
	cand := w.c.VisibilityUpperBound()
	live := w.c.InProgress()
	if len(live) == 0 {
		w.safe = max(w.safe, cand)
		return w.safe
	}
	w.cand, w.waitFor = cand, live
	return w.safe
}
