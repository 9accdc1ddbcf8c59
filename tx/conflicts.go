package tx

// conflictIndex detects write-write conflicts in O(keys) per commit: one map
// from change-key hash to the sequence number of its last commit, instead of
// Tephra's list of change sets that every check walks. While a transaction
// holds a key (between CanCommit and its commit record landing), the entry is
// marked pending with the holder's id, and the value it replaced is kept by
// the holder to restore on abort. Keys older than the oldest in-progress
// transaction can never conflict again and are swept.
type conflictIndex struct {
	seq     uint64            // bumped by every commit that carried keys
	keys    map[uint64]uint64 // key -> seq of its last commit, or pendingBit|holder id
	sweepAt int               // sweep when the map reaches this size
}

const (
	pendingBit = uint64(1) << 63
	minSweep   = 4096
)

func newConflictIndex() conflictIndex {
	return conflictIndex{keys: make(map[uint64]uint64), sweepAt: minSweep}
}

// checkAndHold reserves keys (duplicates allowed) for transaction id, which started at startSeq,
// unless one of them committed after it started or is held by another
// transaction (pending). It returns the replaced values, for release.
func (ci *conflictIndex) checkAndHold(id, startSeq uint64, keys, saved []uint64) (_ []uint64, pending, ok bool) {
	if cap(saved) < len(keys) {
		saved = make([]uint64, 0, len(keys))
	}
	saved = saved[:0]
	for _, k := range keys {
		v := ci.keys[k]
		if v&pendingBit != 0 {
			if v&^pendingBit != id {
				return saved, true, false
			}
		} else if v > startSeq {
			return saved, false, false
		}
		saved = append(saved, v)
	}
	for _, k := range keys {
		ci.keys[k] = pendingBit | id
	}
	return saved, false, true
}

// release gives back keys id holds, restoring what they replaced.
func (ci *conflictIndex) release(id uint64, keys, saved []uint64) {
	for i, k := range keys {
		if ci.keys[k] != pendingBit|id {
			continue
		}
		if i < len(saved) && saved[i] != 0 {
			ci.keys[k] = saved[i]
		} else {
			delete(ci.keys, k)
		}
	}
}

// commit records keys as committed now (replacing their pending marks).
func (ci *conflictIndex) commit(keys []uint64) {
	if len(keys) == 0 {
		return
	}
	ci.seq++
	for _, k := range keys {
		ci.keys[k] = ci.seq
	}
}

// pruneBelow forgets commits with a sequence below bound: no transaction that
// started at or after bound-1 can conflict with them. It only sweeps once the
// map has doubled since the last sweep, so its cost is O(1) per commit
// amortized and the map stays within twice the live window (at least 4096).
func (ci *conflictIndex) pruneBelow(bound uint64) {
	if len(ci.keys) < ci.sweepAt {
		return
	}
	// Copy the survivors into a fresh map rather than delete in place: a Go
	// map never shrinks, and the deleted slots would slow every later lookup
	// and sweep.
	live := make(map[uint64]uint64, ci.sweepAt) // sized for the next cycle: no growth
	for k, v := range ci.keys {
		if v&pendingBit != 0 || v >= bound {
			live[k] = v
		}
	}
	ci.keys = live
	ci.sweepAt = max(minSweep, 2*len(ci.keys))
}

// reset forgets every key; only when no transaction is in progress.
func (ci *conflictIndex) reset() {
	if len(ci.keys) > 4*minSweep {
		ci.keys = make(map[uint64]uint64) // do not keep a grown table
	} else {
		clear(ci.keys)
	}
	ci.sweepAt = minSweep
}

// committedKeys calls fn for every committed (not pending) key.
func (ci *conflictIndex) committedKeys(fn func(key, seq uint64)) {
	for k, v := range ci.keys {
		if v&pendingBit == 0 {
			fn(k, v)
		}
	}
}

// size is the number of keys kept for conflict detection.
func (ci *conflictIndex) size() int { return len(ci.keys) }
