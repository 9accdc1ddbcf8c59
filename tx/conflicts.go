package tx

// conflictIndex detects write-write conflicts in O(keys) per commit, instead
// of Tephra's list of change sets that every check walks.
//
// Committed keys live in generations: tables from change-key hash to the
// sequence number of its last commit, each frozen once it holds genKeys keys.
// A transaction only looks at generations with a commit after it started, so
// the common young transaction probes one small table that stays in the CPU
// cache, while the index as a whole still spans everything since the oldest
// transaction in progress (a goroutine preempted mid-transaction keeps
// thousands of later commits alive: one big table made every probe a cache
// miss). A generation whose last commit is older than the oldest transaction
// in progress can never conflict again and is dropped.
//
// Keys held between CanCommit and the commit record landing ("pending") sit in
// a separate small table from key to holder, so releasing them on abort
// restores nothing: the committed generations never change under a hold.
type conflictIndex struct {
	seq     uint64        // bumped by every commit that carried keys
	holds   keyTable      // key -> pendingBit|holder id; absent = not held
	gens    []*generation // oldest first; the last one takes new commits
	genKeys int           // keys per generation before it is frozen
	spare   []*generation // dropped generations, kept for reuse (up to maxSpare)
	rotated bool          // a generation was frozen since the last prune
}

type generation struct {
	keys   keyTable // key -> seq of its last commit in this generation
	maxSeq uint64   // the newest commit recorded here
}

const (
	pendingBit = uint64(1) << 63
	// defaultGenKeys sizes a generation's table at 128 KiB: it stays in a
	// core's L2 cache beside everything else a committer touches, and a
	// rotation (one prune check over the in-progress set) comes only every
	// few hundred commits. 2K–16K measured within the noise of this machine.
	defaultGenKeys = 4 << 10
	minHolds       = 1024
	maxSpare       = 16 // 2 MiB of tables at the default size
)

func newConflictIndex() conflictIndex {
	return newConflictIndexSized(defaultGenKeys)
}

func newConflictIndexSized(genKeys int) conflictIndex {
	return conflictIndex{
		holds:   newKeyTable(minHolds),
		gens:    []*generation{{keys: newKeyTable(genKeys)}},
		genKeys: genKeys,
	}
}

// checkAndHold reserves keys (duplicates allowed) for transaction id, which
// started at startSeq, unless one of them committed after it started, or else
// is held by another transaction (pending).
func (ci *conflictIndex) checkAndHold(id, startSeq uint64, keys []uint64) (pending, ok bool) {
	// Newest first: generations are in commit order, so the first one with
	// nothing after startSeq ends the search.
	for i := len(ci.gens) - 1; i >= 0; i-- {
		g := ci.gens[i]
		if g.maxSeq <= startSeq {
			break
		}
		for _, k := range keys {
			if g.keys.get(k) > startSeq {
				return false, false
			}
		}
	}
	// Hold as we go (one probe per key); a key held by another undoes ours.
	mark := pendingBit | id
	for i, k := range keys {
		switch old := ci.holds.swap(k, mark); old {
		case 0, mark: // free, a duplicate, or held since an earlier CanCommit
		default:
			ci.holds.set(k, old)
			ci.release(id, keys[:i])
			return true, false
		}
	}
	return false, true
}

// hold marks keys as held by id; none of them may be held by another.
func (ci *conflictIndex) hold(id uint64, keys []uint64) {
	mark := pendingBit | id
	for _, k := range keys {
		ci.holds.set(k, mark)
	}
}

// release gives back keys id holds.
func (ci *conflictIndex) release(id uint64, keys []uint64) {
	mark := pendingBit | id
	for _, k := range keys {
		ci.holds.deleteIf(k, mark)
	}
}

// commit records keys as committed now, ending id's holds on them.
func (ci *conflictIndex) commit(id uint64, keys []uint64) {
	if len(keys) == 0 {
		return
	}
	ci.release(id, keys)
	ci.seq++
	g := ci.gens[len(ci.gens)-1]
	for _, k := range keys {
		g.keys.set(k, ci.seq)
	}
	g.maxSeq = ci.seq
	if g.keys.used >= ci.genKeys {
		ci.gens = append(ci.gens, ci.newGeneration())
		ci.rotated = true
	}
}

func (ci *conflictIndex) newGeneration() *generation {
	if n := len(ci.spare); n > 0 {
		g := ci.spare[n-1]
		ci.spare = ci.spare[:n-1]
		g.keys.clear()
		g.maxSeq = ci.seq
		return g
	}
	// maxSeq starts at the current sequence so that it never decreases from
	// one generation to the next: the newest-first search relies on it.
	return &generation{keys: newKeyTable(ci.genKeys), maxSeq: ci.seq}
}

// pruneBelow forgets commits with a sequence below bound: no transaction that
// started at or after bound-1 can conflict with them. Whole generations go;
// the one taking commits is cleared instead when everything in it is older.
func (ci *conflictIndex) pruneBelow(bound uint64) {
	ci.rotated = false
	n := 0
	for n < len(ci.gens)-1 && ci.gens[n].maxSeq < bound {
		n++
	}
	if n > 0 {
		for _, g := range ci.gens[:n] {
			if len(ci.spare) < maxSpare {
				ci.spare = append(ci.spare, g)
			}
		}
		ci.gens = append(ci.gens[:0], ci.gens[n:]...)
		clear(ci.gens[len(ci.gens) : n+len(ci.gens)])
	}
	if len(ci.gens) == 1 && ci.gens[0].maxSeq < bound && ci.gens[0].keys.used > 0 {
		ci.gens[0].keys.clear()
	}
}

// size is the number of committed keys kept (counting a key once per
// generation it was committed in) plus the keys held.
func (ci *conflictIndex) size() int {
	n := ci.holds.used
	for _, g := range ci.gens {
		n += g.keys.used
	}
	return n
}
