package tx

// conflictIndex detects write-write conflicts in O(keys) per commit: it maps
// each recently committed change key to the commit sequence number at which it
// last committed, instead of keeping Tephra's list of change sets that every
// check walks. Keys whose sequence is older than the oldest in-progress
// transaction can never conflict again and are pruned.
type conflictIndex struct {
	seq       uint64            // bumped by every commit that carried keys
	committed map[uint64]uint64 // key -> seq of its last commit
	pending   map[uint64]uint64 // key -> id of the tx holding it (between CanCommit and commit)
	sweepAt   int               // sweep committed when it reaches this size
}

const minSweep = 4096

func newConflictIndex() conflictIndex {
	return conflictIndex{committed: make(map[uint64]uint64), pending: make(map[uint64]uint64), sweepAt: minSweep}
}

// check reports whether a tx that started at startSeq may commit keys. When it
// may not, pending tells whether the other writer is still committing.
func (ci *conflictIndex) check(id, startSeq uint64, keys []uint64) (pending, ok bool) {
	for _, k := range keys {
		if s, hit := ci.committed[k]; hit && s > startSeq {
			return false, false
		}
		if holder, hit := ci.pending[k]; hit && holder != id {
			return true, false
		}
	}
	return false, true
}

func (ci *conflictIndex) hold(id uint64, keys []uint64) {
	for _, k := range keys {
		ci.pending[k] = id
	}
}

func (ci *conflictIndex) release(id uint64, keys []uint64) {
	for _, k := range keys {
		if ci.pending[k] == id {
			delete(ci.pending, k)
		}
	}
}

// commit records keys as committed now.
func (ci *conflictIndex) commit(keys []uint64) {
	if len(keys) == 0 {
		return
	}
	ci.seq++
	for _, k := range keys {
		ci.committed[k] = ci.seq
	}
}

// pruneBelow forgets commits with a sequence below bound: no transaction that
// started at or after bound-1 can conflict with them. It only sweeps once the
// index has doubled since the last sweep, so its cost is O(1) per commit
// amortized and the index stays within twice the live window (at least 4096).
func (ci *conflictIndex) pruneBelow(bound uint64) {
	if len(ci.committed) < ci.sweepAt {
		return
	}
	if bound > ci.seq {
		clear(ci.committed) // nothing in progress: no key can conflict
	} else {
		for k, s := range ci.committed {
			if s < bound {
				delete(ci.committed, k)
			}
		}
	}
	ci.sweepAt = max(minSweep, 2*len(ci.committed))
}

// size is the number of committed keys kept for conflict detection.
func (ci *conflictIndex) size() int { return len(ci.committed) }
