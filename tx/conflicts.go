package tx

// conflictIndex detects write-write conflicts in O(keys) per commit: one table
// from change-key hash to the sequence number of its last commit, instead of
// Tephra's list of change sets that every check walks. While a transaction
// holds a key (between CanCommit and its commit record landing), the entry is
// marked pending with the holder's id, and the value it replaced is kept by
// the holder to restore on abort. Keys older than the oldest in-progress
// transaction can never conflict again and are swept.
type conflictIndex struct {
	seq     uint64   // bumped by every commit that carried keys
	keys    keyTable // key -> seq of its last commit, or pendingBit|holder id; 0 = none
	sweepAt int      // sweep when the table holds this many keys
}

const (
	pendingBit = uint64(1) << 63
	minSweep   = 4096
)

func newConflictIndex() conflictIndex {
	return conflictIndex{keys: newKeyTable(minSweep), sweepAt: minSweep}
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
		v := ci.keys.get(k)
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
		ci.keys.set(k, pendingBit|id)
	}
	return saved, false, true
}

// release gives back keys id holds, restoring what they replaced.
func (ci *conflictIndex) release(id uint64, keys, saved []uint64) {
	for i, k := range keys {
		if ci.keys.get(k) != pendingBit|id {
			continue
		}
		if i < len(saved) {
			ci.keys.set(k, saved[i]) // 0 when the key was absent
		} else {
			ci.keys.set(k, 0)
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
		ci.keys.set(k, ci.seq)
	}
}

// pruneBelow forgets commits with a sequence below bound: no transaction that
// started at or after bound-1 can conflict with them. It only sweeps once the
// map has doubled since the last sweep, so its cost is O(1) per commit
// amortized and the map stays within twice the live window (at least 4096).
func (ci *conflictIndex) pruneBelow(bound uint64) {
	if ci.keys.used < ci.sweepAt {
		return
	}
	// Copy the survivors into a fresh table: it drops the slots of absent
	// keys too, and is sized for the next cycle so that it need not grow.
	live := newKeyTable(ci.sweepAt)
	ci.keys.each(func(k, v uint64) {
		if v&pendingBit != 0 || v >= bound {
			live.set(k, v)
		}
	})
	ci.keys = live
	ci.sweepAt = max(minSweep, 2*ci.keys.used)
}

// reset forgets every key; only when no transaction is in progress.
func (ci *conflictIndex) reset() {
	if len(ci.keys.slots) > 16*minSweep {
		ci.keys = newKeyTable(minSweep) // do not keep a grown table
	} else {
		ci.keys.clear()
	}
	ci.sweepAt = minSweep
}

// committedKeys calls fn for every committed (not pending) key.
func (ci *conflictIndex) committedKeys(fn func(key, seq uint64)) {
	ci.keys.each(func(k, v uint64) {
		if v&pendingBit == 0 {
			fn(k, v)
		}
	})
}

// size is the number of slots in use (a bound on the keys kept).
func (ci *conflictIndex) size() int { return ci.keys.used }
