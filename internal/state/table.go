package state

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
)

// Table is a transactional key-value table: a view onto its Store's
// transaction. It implements flowlet.Table.
type Table struct {
	s      *Store
	name   string
	prefix []byte
	err    error // invalid name

	buf   map[string]tableWrite
	dirty bool
}

type tableWrite struct {
	value []byte
	del   bool
}

var _ flowlet.Table = (*Table)(nil)

func (t *Table) versionKey(key []byte, wp uint64) []byte {
	k := make([]byte, 0, len(t.prefix)+len(key)+termLen+versionLen+2)
	k = append(k, t.prefix...)
	k = appendTerm(appendEscaped(k, key))
	return appendVersion(k, wp)
}

func (t *Table) check(key []byte) error {
	if t.err != nil {
		return t.err
	}
	if t.s.tx == nil {
		return ErrNoTransaction
	}
	if len(key) > flowlet.MaxKeySize {
		return fmt.Errorf("state: table %q: key of %d bytes exceeds %d", t.name, len(key), flowlet.MaxKeySize)
	}
	return nil
}

func (t *Table) markDirty() {
	if !t.dirty {
		t.dirty = true
		t.s.dirtyTables = append(t.s.dirtyTables, t)
	}
}

// Put implements flowlet.Table.
func (t *Table) Put(key, value []byte) error {
	if err := t.check(key); err != nil {
		return err
	}
	t.buf[string(key)] = tableWrite{value: bytes.Clone(value)}
	t.markDirty()
	return nil
}

// Delete implements flowlet.Table.
func (t *Table) Delete(key []byte) error {
	if err := t.check(key); err != nil {
		return err
	}
	t.buf[string(key)] = tableWrite{del: true}
	t.markDirty()
	return nil
}

// Get implements flowlet.Table.
func (t *Table) Get(key []byte) ([]byte, bool, error) {
	if err := t.check(key); err != nil {
		return nil, false, err
	}
	if w, ok := t.buf[string(key)]; ok {
		if w.del {
			return nil, false, nil
		}
		return bytes.Clone(w.value), true, nil
	}
	rt, err := t.s.view()
	if err != nil {
		return nil, false, err
	}
	p := make([]byte, 0, len(t.prefix)+len(key)+termLen+2)
	p = appendTerm(appendEscaped(append(p, t.prefix...), key))
	it := rt.NewIterator(badger.IteratorOptions{Prefix: p, PrefetchValues: false})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(p)+versionLen {
			continue // cannot happen with the escaping; be safe
		}
		if !t.s.tx.Visible(^beUint64(k[len(p):])) {
			continue
		}
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, false, err
		}
		if len(v) == 0 || v[0] != tagValue {
			return nil, false, nil
		}
		return v[1:], true, nil
	}
	return nil, false, nil
}

// Scan implements flowlet.Table.
func (t *Table) Scan(opts flowlet.ScanOptions) flowlet.Iterator {
	if err := t.check(nil); err != nil {
		return &errIter{err: err}
	}
	rt, err := t.s.view()
	if err != nil {
		return &errIter{err: err}
	}
	var over []overlay
	for k, w := range t.buf {
		if opts.Match([]byte(k)) {
			over = append(over, overlay{key: k, value: w.value, del: w.del})
		}
	}
	slices.SortFunc(over, func(a, b overlay) int { return bytes.Compare([]byte(a.key), []byte(b.key)) })
	it := &tableIter{}
	it.c = newCursor(rt, t.s, t.prefix, opts, func(v []byte) (bool, error) {
		it.cur.exists = len(v) > 0 && v[0] == tagValue
		if it.cur.exists {
			it.cur.value = append(it.cur.value[:0], v[1:]...)
		}
		return true, nil
	}, &it.cur)
	it.over = over
	it.limit = opts.Limit
	return it
}

type overlay struct {
	key   string
	value []byte
	del   bool
	delta int64
}

// tableIter merges the stored versions with the step's own writes.
type tableIter struct {
	c     *cursor
	cur   resolved // the cursor's current stored key
	over  []overlay
	limit int
	n     int

	key, value []byte
	err        error
	closed     bool
}

func (it *tableIter) Next() bool {
	if it.err != nil || it.closed || (it.limit > 0 && it.n >= it.limit) {
		return false
	}
	for {
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
			if have && o.key == string(it.cur.key) {
				it.c.consume()
			}
			it.over = it.over[1:]
			if o.del {
				continue
			}
			it.key, it.value = append(it.key[:0], o.key...), append(it.value[:0], o.value...)
		default:
			it.c.consume()
			if !it.cur.exists {
				continue
			}
			it.key, it.value = append(it.key[:0], it.cur.key...), append(it.value[:0], it.cur.value...)
		}
		it.n++
		return true
	}
}

func (it *tableIter) Key() []byte   { return it.key }
func (it *tableIter) Value() []byte { return it.value }
func (it *tableIter) Err() error    { return it.err }
func (it *tableIter) Close() error {
	if !it.closed {
		it.closed = true
		it.c.close()
	}
	return nil
}

type errIter struct{ err error }

func (e *errIter) Next() bool    { return false }
func (e *errIter) Key() []byte   { return nil }
func (e *errIter) Value() []byte { return nil }
func (e *errIter) Count() int64  { return 0 }
func (e *errIter) Err() error    { return e.err }
func (e *errIter) Close() error  { return nil }
