package tx

import (
	"math/rand/v2"
	"testing"
)

// The generational conflict index gives the same answers as a plain model
// (last commit of every key, holders of every key) for transactions of any
// age, through rotations, prunes, holds, releases and commits.
func TestConflictIndexMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ci := newConflictIndexSized(64) // many small generations
	last := map[uint64]uint64{}     // key -> seq of its last commit
	holder := map[uint64]uint64{}   // key -> holding tx id
	type txn struct {
		id, start uint64
		keys      []uint64
		holding   bool
		straggler bool // finishes rarely: keeps old generations alive
	}
	var live []*txn
	nextID := uint64(1)
	maxGens := 0
	key := func() uint64 { return fix(rng.Uint64N(2000)) } // overlapping key space
	for step := 0; step < 200000; step++ {
		switch op := rng.IntN(10); {
		case op < 2 || len(live) == 0: // start
			live = append(live, &txn{id: nextID, start: ci.seq, straggler: rng.IntN(100) == 0})
			nextID++
		case op < 5: // check and hold
			x := live[rng.IntN(len(live))]
			if x.holding || x.straggler && ci.seq-x.start < 300 {
				continue // stragglers check late, against old generations
			}
			keys := make([]uint64, 1+rng.IntN(5))
			for i := range keys {
				keys[i] = key()
			}
			wantPending, wantOK := false, true
			for _, k := range keys {
				if last[k] > x.start {
					wantOK = false
					break
				}
			}
			if wantOK {
				for _, k := range keys {
					if h, ok := holder[k]; ok && h != x.id {
						wantPending, wantOK = true, false
						break
					}
				}
			}
			pending, ok := ci.checkAndHold(x.id, x.start, keys)
			if ok != wantOK || pending != wantPending {
				t.Fatalf("step %d: checkAndHold(start %d) = pending %v ok %v, model says %v %v", step, x.start, pending, ok, wantPending, wantOK)
			}
			if ok {
				x.keys, x.holding = keys, true
				for _, k := range keys {
					holder[k] = x.id
				}
			}
		default: // finish: commit a holder, or abort
			i := rng.IntN(len(live))
			x := live[i]
			if x.straggler && rng.IntN(100) > 0 {
				continue
			}
			live = append(live[:i], live[i+1:]...)
			if x.holding && rng.IntN(4) > 0 {
				ci.commit(x.id, x.keys)
				for _, k := range x.keys {
					last[k] = ci.seq
				}
			} else {
				ci.release(x.id, x.keys)
			}
			for _, k := range x.keys {
				if holder[k] == x.id {
					delete(holder, k)
				}
			}
			if ci.rotated {
				oldest := ci.seq
				for _, y := range live {
					oldest = min(oldest, y.start)
				}
				ci.pruneBelow(oldest + 1)
			}
		}
		maxGens = max(maxGens, len(ci.gens))
		if ci.holds.used != len(holder) {
			t.Fatalf("step %d: %d holds counted, model has %d", step, ci.holds.used, len(holder))
		}
	}
	t.Logf("%d commits, %d generations at most, %d live", ci.seq, maxGens, len(live))
	if maxGens < 4 || ci.seq < 1000 {
		t.Fatalf("the test did not exercise the index: %d generations at most, %d commits", maxGens, ci.seq)
	}
	// With nothing in progress, one prune leaves a single, empty generation.
	for _, x := range live {
		ci.release(x.id, x.keys)
	}
	ci.pruneBelow(ci.seq + 1)
	if ci.size() != 0 || len(ci.gens) != 1 {
		t.Fatalf("after the last prune: %d keys in %d generations", ci.size(), len(ci.gens))
	}
}

// The generation holding the first commit after the oldest transaction
// started survives every prune while that transaction is in progress.
func TestConflictIndexPruneBoundary(t *testing.T) {
	ci := newConflictIndexSized(1) // every commit freezes its generation
	const old = 1
	start := ci.seq
	a, b := fix(11), fix(12)
	for i, k := range []uint64{a, b} {
		if _, ok := ci.checkAndHold(uint64(2+i), ci.seq, []uint64{k}); !ok {
			t.Fatal("hold refused")
		}
		ci.commit(uint64(2+i), []uint64{k})
		ci.pruneBelow(start + 1) // the oldest in progress started at start
	}
	for _, k := range []uint64{a, b} {
		if _, ok := ci.checkAndHold(old, start, []uint64{k}); ok {
			t.Fatalf("key %d committed after the old transaction started must conflict", k)
		}
	}
	ci.pruneBelow(ci.seq + 1)
	if ci.size() != 0 {
		t.Fatalf("%d keys kept with nothing in progress", ci.size())
	}
}
