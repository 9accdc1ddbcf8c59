package state

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
)

// space is what a Table and a Counters share: a named key range of a Store
// whose keys are versioned by write pointer.
type space struct {
	s      *Store
	kind   string // "table" or "counters", for errors
	name   string
	prefix []byte
	err    error // invalid name
	dirty  bool  // listed in the Store's dirty tables or counters
}

func (sp *space) versionKey(key []byte, wp uint64) []byte {
	k := make([]byte, 0, len(sp.prefix)+len(key)+termLen+versionLen+2)
	k = append(k, sp.prefix...)
	k = appendTerm(appendEscaped(k, key))
	return appendVersion(k, wp)
}

func (sp *space) check(key []byte) error {
	if sp.err != nil {
		return sp.err
	}
	if sp.s.tx == nil {
		return ErrNoTransaction
	}
	if len(key) > flowlet.MaxKeySize {
		return fmt.Errorf("state: %s %q: %w: %d bytes, at most %d", sp.kind, sp.name, flowlet.ErrKeyTooLarge, len(key), flowlet.MaxKeySize)
	}
	return nil
}

// versions calls fn with each version of key that the step's snapshot sees,
// newest first, until fn says stop.
func (sp *space) versions(key []byte, fn func(*badger.Item) (stop bool, err error)) error {
	rt, err := sp.s.view()
	if err != nil {
		return err
	}
	p := make([]byte, 0, len(sp.prefix)+len(key)+termLen+2)
	p = appendTerm(appendEscaped(append(p, sp.prefix...), key))
	it := rt.NewIterator(badger.IteratorOptions{Prefix: p, PrefetchValues: false})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(p)+versionLen || !sp.s.tx.Visible(^beUint64(k[len(p):])) {
			continue // a longer key cannot happen with the escaping; be safe
		}
		if stop, err := fn(it.Item()); stop || err != nil {
			return err
		}
	}
	return nil
}

// scan starts m on the stored keys opts selects, merged with over (the
// step's own writes that opts matches, in any order).
func (sp *space) scan(m *merge, opts flowlet.ScanOptions, over []overlay, fold func([]byte) (bool, error)) error {
	if err := sp.check(nil); err != nil {
		return err
	}
	rt, err := sp.s.view()
	if err != nil {
		return err
	}
	slices.SortFunc(over, func(a, b overlay) int { return bytes.Compare([]byte(a.key), []byte(b.key)) })
	m.over, m.limit = over, opts.Limit
	m.c = newCursor(rt, sp.s, sp.prefix, opts, fold, &m.cur)
	m.s, m.slot = sp.s, len(sp.s.scans)
	sp.s.scans = append(sp.s.scans, m)
	return nil
}

// overlay is one of the step's buffered writes as a scan merges it.
type overlay struct {
	key   string
	value []byte
	del   bool
	delta int64
}

// merge walks a cursor's stored keys and the step's sorted writes together,
// in key order: what tableIter and counterIter share.
type merge struct {
	s     *Store
	slot  int // m's index in s.scans while it is open
	c     *cursor
	cur   resolved // the cursor's current stored key
	over  []overlay
	limit int
	n     int

	err    error
	closed bool
}

// next moves to the next key. It returns the step's write of that key (nil
// if none) and whether the key is also stored (then m.cur is its stored
// value); ok is false at the end, at the limit, after Close or on error.
func (m *merge) next() (o *overlay, stored, ok bool) {
	if m.err != nil || m.closed || (m.limit > 0 && m.n >= m.limit) {
		return nil, false, false
	}
	// Badger's iterator reads the closed DB's unmapped tables: a fault
	// that kills the process.
	if m.err = m.s.closedErr(); m.err != nil {
		return nil, false, false
	}
	have := m.c.peek()
	if m.c.err != nil {
		m.err = m.c.err
		return nil, false, false
	}
	if len(m.over) > 0 {
		o = &m.over[0]
	}
	switch {
	case !have && o == nil:
		return nil, false, false
	case o != nil && (!have || bytes.Compare([]byte(o.key), m.cur.key) <= 0):
		stored = have && o.key == string(m.cur.key)
		m.over = m.over[1:]
	default:
		o, stored = nil, true
	}
	if stored {
		m.c.consume()
	}
	return o, stored, true
}

func (m *merge) Err() error { return m.err }

func (m *merge) Close() error {
	if !m.closed {
		m.closed = true
		m.c.close()
		// Out of the step's open iterators (moving the last into its
		// slot): a step that scans per event must not keep them all.
		l := m.s.scans
		last := l[len(l)-1]
		l[m.slot], last.slot = last, m.slot
		l[len(l)-1] = nil
		m.s.scans = l[:len(l)-1]
	}
	return nil
}

// end closes m as its step ends, if the flowlet has not: Badger panics
// when a read view is discarded with an iterator open. It is dead after.
// The Store clears its list of open iterators itself.
func (m *merge) end() {
	if !m.closed {
		m.err = ErrNoTransaction
		m.closed = true
		m.c.close()
	}
}

type errIter struct{ err error }

func (e *errIter) Next() bool    { return false }
func (e *errIter) Key() []byte   { return nil }
func (e *errIter) Value() []byte { return nil }
func (e *errIter) Count() int64  { return 0 }
func (e *errIter) Err() error    { return e.err }
func (e *errIter) Close() error  { return nil }
