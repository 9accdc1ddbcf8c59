package badgerq

import (
	"slices"
	"sync"

	"github.com/flowrun/flowrun/tx"
)

// partIndex is the in-memory index of one partition: for every priority
// level that holds (or held, since Open) entries, the end of the newest
// entry written there (its producer's write pointer and last chunk + 1). Producers raise it before their commit becomes
// visible (Stage on the fast path, Persist on the general path), and Open
// rebuilds it from the entry keys, so it is never behind what a consumer's
// transaction may see. Consumers use it to skip partitions with nothing to
// read (see mayHaveWork) without touching Badger, and to know which levels
// to read. It never shrinks: an evicted level costs one comparison.
type partIndex struct {
	mu     sync.Mutex
	levels []levelMax // sorted by priority, highest first
}

type levelMax struct {
	prio uint8
	end  position // a scan position at or past end has read the level's newest entry
	// evictFrom: eviction deleted every entry below this pointer, and none
	// can land there any more; the next pass seeks here.
	evictFrom uint64
	// evictPos: the lowest scan position of the groups at the last pass
	// (to the event: a position that moves inside its pointer may pass the
	// end of an entry there, which is then consumed); it also deleted what
	// every group consumed between evictFrom and there (entries not at a
	// hole).
	evictPos position
	// evictHoles: the groups' holes up to evictPos's pointer at the last
	// pass (sorted, each once): the entries there were kept.
	evictHoles []position
}

// setEvictFrom records where eviction of level prio starts next time, the
// lowest scan position it deleted up to and the holes below it it kept.
func (ix *partIndex) setEvictFrom(prio uint8, wp uint64, pos position, holes []position) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i := range ix.levels {
		if ix.levels[i].prio == prio {
			ix.levels[i].evictFrom = wp
			ix.levels[i].evictPos = pos
			if !slices.Equal(ix.levels[i].evictHoles, holes) {
				ix.levels[i].evictHoles = slices.Clone(holes)
			}
			return
		}
	}
}

// raise records that wp wrote chunks 0..chunks-1 into level prio.
func (ix *partIndex) raise(prio uint8, wp uint64, chunks uint32) {
	end := position{wp: wp, chunk: chunks}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i := range ix.levels {
		if ix.levels[i].prio == prio {
			if ix.levels[i].end.less(end) {
				ix.levels[i].end = end
			}
			return
		}
	}
	i, _ := slices.BinarySearchFunc(ix.levels, prio, func(l levelMax, p uint8) int { return int(p) - int(l.prio) })
	ix.levels = slices.Insert(ix.levels, i, levelMax{prio: prio, end: end})
}

// snapshot appends the levels to dst.
func (ix *partIndex) snapshot(dst []levelMax) []levelMax {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return append(dst, ix.levels...)
}

// mayHaveWork reports whether a group whose state in this partition is st
// may find something to settle there in transaction t: a level it has no
// state for, a level written at or after its scan position, or a hole that t
// can resolve (now visible, or known invalid). When it returns false, every
// entry of the partition is delivered, expired or still invisible to t, so a
// read would only find nothing.
func (ix *partIndex) mayHaveWork(st *partState, t *tx.Tx) bool {
	ix.mu.Lock()
	for _, lm := range ix.levels {
		l := st.find(lm.prio)
		if l == nil || l.pos.less(lm.end) {
			ix.mu.Unlock()
			return true
		}
	}
	ix.mu.Unlock()
	for i := range st.levels {
		if resolvableHole(&st.levels[i], t) {
			return true
		}
	}
	return false
}

// levelMayHaveWork is mayHaveWork for one level, against a snapshot of the
// index; l is nil when the group has no state there yet.
func levelMayHaveWork(idx []levelMax, prio uint8, l *levelState, t *tx.Tx) bool {
	for _, lm := range idx {
		if lm.prio == prio && (l == nil || l.pos.less(lm.end)) {
			return true
		}
	}
	return l != nil && resolvableHole(l, t)
}

// resolvableHole reports whether t can settle one of l's holes: its
// producer is now visible (read it, or find it wrote nothing here) or it is
// known invalid. With t nil (no snapshot to judge by), any hole may be.
func resolvableHole(l *levelState, t *tx.Tx) bool {
	if t == nil {
		return len(l.holes) > 0
	}
	fip := t.FirstInProgress()
	for _, h := range l.holes {
		if h.wp < fip || t.Visible(h.wp) {
			return true
		}
	}
	return false
}

// levelsToRead lists, highest priority first, the levels a read of the
// partition must visit: every indexed level, and every level of st that has
// holes (they may need dropping even if the level has no entries left).
func levelsToRead(dst []uint8, idx []levelMax, st *partState) []uint8 {
	for _, lm := range idx {
		dst = append(dst, lm.prio)
	}
	for i := range st.levels {
		if len(st.levels[i].holes) > 0 && !slices.Contains(dst, st.levels[i].prio) {
			dst = append(dst, st.levels[i].prio)
		}
	}
	slices.SortFunc(dst, func(a, b uint8) int { return int(b) - int(a) })
	return dst
}
