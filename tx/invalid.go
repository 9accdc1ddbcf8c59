package tx

import (
	"math"
	"slices"
	"sync"
)

// invalidList is an immutable sorted set of invalid write pointers. The
// coordinator replaces it (copy on write) when it changes, which is rare: it
// changes on invalidation and pruning, never on an ordinary commit.
type invalidList struct {
	ids []uint64
}

var emptyInvalid = &invalidList{}

func (l *invalidList) contains(v uint64) bool {
	return len(l.ids) > 0 && v >= l.ids[0] && containsSorted(l.ids, v)
}

// with returns a new list holding l's ids and add (sorted or not).
func (l *invalidList) with(add []uint64) *invalidList {
	if len(add) == 0 {
		return l
	}
	ids := make([]uint64, 0, len(l.ids)+len(add))
	ids = append(ids, l.ids...)
	ids = append(ids, add...)
	slices.Sort(ids)
	return &invalidList{ids: slices.Compact(ids)}
}

// below returns a new list without the ids under bound.
func (l *invalidList) without(bound uint64) *invalidList {
	i, _ := slices.BinarySearch(l.ids, bound)
	if i == 0 {
		return l
	}
	return &invalidList{ids: slices.Clone(l.ids[i:])}
}

// Pruner is how a participant tells the coordinator that its store holds no
// data written by invalid transactions below some pointer any more (it rolled
// them back or compacted them away). Invalid pointers below the smallest bound
// reported by every registered Pruner are dropped from the invalid list, which
// keeps the list bounded without any manual step.
//
// A participant that persists data before commit must register a Pruner;
// participants that only stage writes for the fast path never leave such data
// and report NoInvalidData once.
type Pruner struct {
	c     *Coordinator
	name  string
	mu    sync.Mutex
	bound uint64
}

// NoInvalidData is the bound a participant reports when it never holds data of
// invalid transactions.
const NoInvalidData = math.MaxUint64

// RegisterPruner adds a prune reporter. Until it reports, it holds pruning at 0.
func (c *Coordinator) RegisterPruner(name string) *Pruner {
	p := &Pruner{c: c, name: name}
	c.mu.Lock()
	c.pruners = append(c.pruners, p)
	c.mu.Unlock()
	return p
}

// Report says: no data of an invalid transaction with a pointer below bound
// remains in this participant's store. Bounds only move forward.
//
// A bound is held at the oldest transaction in progress when it is reported
// (NoInvalidData aside): that transaction may still be invalidated, with data
// it persisted below the bound, and the stored bound must not prune it then.
func (p *Pruner) Report(bound uint64) {
	if bound != NoInvalidData {
		bound = min(bound, p.c.VisibilityUpperBound())
	}
	p.mu.Lock()
	if bound > p.bound {
		p.bound = bound
	}
	p.mu.Unlock()
	p.c.pruneInvalid()
}

// Unregister removes the reporter, e.g. when its participant is closed for good.
func (p *Pruner) Unregister() {
	c := p.c
	c.mu.Lock()
	c.pruners = slices.DeleteFunc(c.pruners, func(q *Pruner) bool { return q == p })
	c.mu.Unlock()
	c.pruneInvalid()
}

func (p *Pruner) current() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bound
}

// pruneBoundLocked is the smallest bound of all pruners, 0 when there is none.
func (c *Coordinator) pruneBoundLocked() uint64 {
	if len(c.pruners) == 0 {
		return 0
	}
	bound := uint64(math.MaxUint64)
	for _, p := range c.pruners {
		bound = min(bound, p.current())
	}
	return bound
}

func (c *Coordinator) pruneInvalid() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneInvalidLocked()
}

func (c *Coordinator) pruneInvalidLocked() {
	// A report after Close (or a log failure) changes nothing: the log that
	// would record the prune is closed, and its refusal would turn ErrClosed
	// into ErrLogFailed for every later call.
	if len(c.invalid.ids) == 0 || c.checkOpenLocked() != nil {
		return
	}
	bound := c.pruneBoundLocked()
	if bound == 0 || bound <= c.invalid.ids[0] {
		return
	}
	c.invalid = c.invalid.without(bound)
	c.dirty = true
	c.stats.pruned++
	c.appendLocked(Edit{Kind: EditPrune, Pointer: bound}, false)
}
