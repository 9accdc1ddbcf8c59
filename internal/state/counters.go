package state

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
)

// Counters is a table of conflict-free counters: Add records a delta under
// the step's write pointer and reports no change key, so concurrent steps
// never conflict on it; Get sums the visible deltas (down to the newest
// visible base that GC folded older deltas into). It implements
// flowlet.Counters.
type Counters struct {
	s      *Store
	name   string
	prefix []byte
	err    error

	buf   map[string]int64
	dirty bool
}

var _ flowlet.Counters = (*Counters)(nil)

func (c *Counters) versionKey(key []byte, wp uint64) []byte {
	k := make([]byte, 0, len(c.prefix)+len(key)+termLen+versionLen+2)
	k = append(k, c.prefix...)
	k = appendTerm(appendEscaped(k, key))
	return appendVersion(k, wp)
}

func (c *Counters) check(key []byte) error {
	if c.err != nil {
		return c.err
	}
	if c.s.tx == nil {
		return ErrNoTransaction
	}
	if len(key) > flowlet.MaxKeySize {
		return fmt.Errorf("state: counters %q: key of %d bytes exceeds %d", c.name, len(key), flowlet.MaxKeySize)
	}
	return nil
}

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
	rt, err := c.s.view()
	if err != nil {
		return 0, err
	}
	sum := c.buf[string(key)]
	p := make([]byte, 0, len(c.prefix)+len(key)+termLen+2)
	p = appendTerm(appendEscaped(append(p, c.prefix...), key))
	it := rt.NewIterator(badger.IteratorOptions{Prefix: p, PrefetchValues: false})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(p)+versionLen || !c.s.tx.Visible(^beUint64(k[len(p):])) {
			continue
		}
		var tag byte
		var n int64
		if err := it.Item().Value(func(v []byte) error {
			var err error
			tag, n, err = decodeCount(v)
			return err
		}); err != nil {
			return 0, err
		}
		sum += n
		if tag == tagBase {
			break
		}
	}
	return sum, nil
}

// Scan implements flowlet.Counters.
func (c *Counters) Scan(opts flowlet.ScanOptions) flowlet.CounterIterator {
	if err := c.check(nil); err != nil {
		return &errIter{err: err}
	}
	rt, err := c.s.view()
	if err != nil {
		return &errIter{err: err}
	}
	var over []overlay
	for k, d := range c.buf {
		if opts.Match([]byte(k)) {
			over = append(over, overlay{key: k, delta: d})
		}
	}
	slices.SortFunc(over, func(a, b overlay) int { return bytes.Compare([]byte(a.key), []byte(b.key)) })
	it := &counterIter{over: over, limit: opts.Limit}
	it.c = newCursor(rt, c.s, c.prefix, opts, func(v []byte) (bool, error) {
		tag, n, err := decodeCount(v)
		if err != nil {
			return true, err
		}
		it.cur.exists = true
		it.cur.count += n
		return tag == tagBase, nil
	}, &it.cur)
	return it
}

type counterIter struct {
	c     *cursor
	cur   resolved
	over  []overlay
	limit int
	n     int

	key    []byte
	count  int64
	err    error
	closed bool
}

func (it *counterIter) Next() bool {
	if it.err != nil || it.closed || (it.limit > 0 && it.n >= it.limit) {
		return false
	}
	have := it.c.peek()
	if it.c.err != nil {
		it.err = it.c.err
		return false
	}
	var o *overlay
	if len(it.over) > 0 {
		o = &it.over[0]
	}
	switch {
	case !have && o == nil:
		return false
	case o != nil && (!have || bytes.Compare([]byte(o.key), it.cur.key) <= 0):
		it.key, it.count = append(it.key[:0], o.key...), o.delta
		if have && o.key == string(it.cur.key) {
			it.count += it.cur.count
			it.c.consume()
		}
		it.over = it.over[1:]
	default:
		it.key, it.count = append(it.key[:0], it.cur.key...), it.cur.count
		it.c.consume()
	}
	it.n++
	return true
}

func (it *counterIter) Key() []byte  { return it.key }
func (it *counterIter) Count() int64 { return it.count }
func (it *counterIter) Err() error   { return it.err }
func (it *counterIter) Close() error {
	if !it.closed {
		it.closed = true
		it.c.close()
	}
	return nil
}
