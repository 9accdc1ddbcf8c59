package badgerq

import (
	"slices"
	"time"

	"github.com/flowrun/flowrun/tx"
)

// Where a group added to a queue that already has groups starts: where all
// of them are. An event counts as consumed for the new group only if every
// existing group consumed it (their meet), so a consumer that replaces
// another one under a new name — an app edit that renames a flowlet or puts
// one in front of another — neither gets again what its predecessor
// consumed nor misses what it did not. Starting at the oldest stored event
// instead made the outcome depend on how far eviction had got: the events
// consumed since its last pass came again. Without existing groups a group
// starts at the oldest stored event.

// committedAt is the slot's state as a transaction with snapshot t sees it
// (t nil: the oldest stored version, which is always committed), without
// resolving the slot. nil: nothing consumed.
func (s *slot) committedAt(t *tx.Tx) *partState {
	if s.resolved || t == nil {
		return s.evictView()
	}
	for i := range s.versions {
		if v := &s.versions[i]; v.wp == 0 || t.Visible(v.wp) {
			return &v.st
		}
	}
	return nil
}

// startStates returns the meet of q's groups' committed states, one per
// partition (nil where nothing is consumed by all), or nil when q has no
// groups. Called with q.mu held. A consumer's commit reaches the in-memory
// state only after it landed (PostCommit): a group added while another
// group's consumer commits may start before that commit's events — they
// come again to it, none is skipped. The runtime adds groups before the app
// runs.
func (b *Backend) startStates(q *queueRT) ([]*partState, error) {
	if len(q.groups) == 0 {
		return nil, nil
	}
	var t *tx.Tx
	if c := b.opts.Coordinator; c != nil {
		var err error
		if t, err = c.StartShort(min(time.Minute, c.MaxTimeout())); err != nil {
			return nil, err
		}
		defer c.Abort(t)
	}
	out := make([]*partState, q.cfg.Partitions)
	for p := range out {
		first := true
		for _, gm := range q.meta.Groups {
			st := q.groups[gm.Name].slots[p].committedAt(t)
			if first {
				out[p], first = cloneState(st), false
				continue
			}
			out[p] = meet(out[p], st)
		}
	}
	return out, nil
}

func cloneState(s *partState) *partState {
	if s == nil {
		return nil
	}
	c := s.clone()
	c.consumed, c.expired = 0, 0 // counted from when the group was added
	return &c
}

// meet is what both a and b consumed (a is the caller's, b is not changed).
func meet(a, b *partState) *partState {
	if a == nil || b == nil {
		return nil
	}
	var levels []levelState
	for _, la := range a.levels {
		if lb := b.find(la.prio); lb != nil {
			levels = append(levels, meetLevel(la, *lb))
		}
	}
	if len(levels) == 0 {
		return nil
	}
	a.levels = levels
	return a
}

// meetLevel: every event before the lower position, except in the pointers
// either side has not finished below it — a hole in either, at the lesser
// progress of the two. A hole may sit at the position's own pointer (a
// producer in progress in the consumer's snapshot whose entries had landed:
// the scan passed them), and then it, not the position, says how far that
// pointer was read: the meet's position is lowered to it.
func meetLevel(a, b levelState) levelState {
	pos := minPos(a.pos, b.pos)
	// progress is how far l consumed pointer wp (wp <= pos.wp <= l.pos.wp);
	// false: all of it.
	progress := func(l levelState, wp uint64) (position, bool) {
		for _, h := range l.holes {
			if h.wp == wp {
				return h, true
			}
		}
		if l.pos.wp == wp {
			return l.pos, true
		}
		return position{}, false
	}
	var holes []position
	for _, h := range append(append([]position(nil), a.holes...), b.holes...) {
		if h.wp > pos.wp || slices.ContainsFunc(holes, func(x position) bool { return x.wp == h.wp }) {
			continue
		}
		pa, inA := progress(a, h.wp)
		pb, inB := progress(b, h.wp)
		p := pb
		switch {
		case inA && inB:
			p = minPos(pa, pb)
		case inA:
			p = pa
		}
		if p.less(pos) { // else the position already says it
			holes = append(holes, p)
		}
	}
	slices.SortFunc(holes, func(x, y position) int {
		switch {
		case x.wp < y.wp:
			return -1
		case x.wp > y.wp:
			return 1
		}
		return 0
	})
	// A hole at the position's own pointer, below the position: a read
	// takes a hole to its pointer's end, then goes on from the position,
	// so what lies between the position and that end came twice. Nothing
	// from the hole on is consumed: that is the position
	// (TestAddGroupMeetHoleAtPosition).
	if n := len(holes); n > 0 && holes[n-1].wp == pos.wp {
		pos = holes[n-1]
		holes = holes[:n-1]
	}
	if len(holes) == 0 {
		holes = nil
	}
	return levelState{prio: a.prio, pos: pos, holes: holes}
}

func minPos(a, b position) position {
	if b.less(a) {
		return b
	}
	return a
}
