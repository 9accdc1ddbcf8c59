package state

import (
	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
)

// Counters is a table of conflict-free counters: Add records a delta under
// the step's write pointer and reports no change key, so concurrent steps
// never conflict on it; Get sums the visible deltas (down to the newest
// visible base that GC folded older deltas into). It implements
// flowlet.Counters.
type Counters struct {
	space
	buf map[string]int64
}

var _ flowlet.Counters = (*Counters)(nil)

// Add implements flowlet.Counters.
func (c *Counters) Add(key []byte, delta int64) error {
	if err := c.check(key); err != nil {
		return err
	}
	c.buf[string(key)] += delta
	if !c.dirty {
		c.dirty = true
		c.s.dirtyCounters = append(c.s.dirtyCounters, c)
	}
	return nil
}

// Get implements flowlet.Counters.
func (c *Counters) Get(key []byte) (int64, error) {
	if err := c.check(key); err != nil {
		return 0, err
	}
	sum := c.buf[string(key)]
	err := c.versions(key, func(item *badger.Item) (bool, error) {
		var tag byte
		var n int64
		if err := item.Value(func(v []byte) error {
			var err error
			tag, n, err = decodeCount(v)
			return err
		}); err != nil {
			return true, c.s.damagedAt(item.Key(), err)
		}
		sum += n
		return tag == tagBase, nil
	})
	if err != nil {
		return 0, err
	}
	return sum, nil
}

// Scan implements flowlet.Counters.
func (c *Counters) Scan(opts flowlet.ScanOptions) flowlet.CounterIterator {
	var over []overlay
	for k, d := range c.buf {
		// A sum of 0 is not staged: the scan shows what the commit stores.
		if d != 0 && opts.Match([]byte(k)) {
			over = append(over, overlay{key: k, delta: d})
		}
	}
	it := &counterIter{}
	if err := c.scan(&it.merge, opts, over, func(v []byte) (bool, error) {
		tag, n, err := decodeCount(v)
		if err != nil {
			return true, err
		}
		it.cur.exists = true
		it.cur.count += n
		return tag == tagBase, nil
	}); err != nil {
		return &errIter{err: err}
	}
	return it
}

// counterIter merges the stored deltas with the step's own.
type counterIter struct {
	merge
	key   []byte
	count int64
}

func (it *counterIter) Next() bool {
	o, stored, ok := it.next()
	switch {
	case !ok:
		return false
	case o == nil:
		it.key, it.count = append(it.key[:0], it.cur.key...), it.cur.count
	default:
		it.key, it.count = append(it.key[:0], o.key...), o.delta
		if stored {
			it.count += it.cur.count
		}
	}
	it.n++
	return true
}

func (it *counterIter) Key() []byte  { return it.key }
func (it *counterIter) Count() int64 { return it.count }
