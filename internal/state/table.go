package state

import (
	"bytes"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
)

// Table is a transactional key-value table: a view onto its Store's
// transaction. It implements flowlet.Table.
type Table struct {
	space
	buf map[string]tableWrite
}

type tableWrite struct {
	value []byte
	del   bool
}

var _ flowlet.Table = (*Table)(nil)

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
	var v []byte
	var ok bool
	err := t.versions(key, func(item *badger.Item) (bool, error) {
		b, err := item.ValueCopy(nil)
		if err == nil {
			v, ok, err = decodeTable(b)
		}
		return true, t.s.damagedAt(item.Key(), err)
	})
	if err != nil || !ok {
		return nil, false, err
	}
	return v, true, nil
}

// Scan implements flowlet.Table.
func (t *Table) Scan(opts flowlet.ScanOptions) flowlet.Iterator {
	var over []overlay
	for k, w := range t.buf {
		if opts.Match([]byte(k)) {
			over = append(over, overlay{key: k, value: w.value, del: w.del})
		}
	}
	it := &tableIter{}
	if err := t.scan(&it.merge, opts, over, func(v []byte) (bool, error) {
		v, live, err := decodeTable(v)
		it.cur.exists = live
		if live {
			it.cur.value = append(it.cur.value[:0], v...)
		}
		return true, err
	}); err != nil {
		return &errIter{err: err}
	}
	return it
}

// tableIter merges the stored versions with the step's own writes.
type tableIter struct {
	merge
	key, value []byte
}

func (it *tableIter) Next() bool {
	for {
		o, _, ok := it.next()
		switch {
		case !ok:
			return false
		case o != nil:
			if o.del {
				continue
			}
			it.key, it.value = append(it.key[:0], o.key...), append(it.value[:0], o.value...)
		case !it.cur.exists:
			continue
		default:
			it.key, it.value = append(it.key[:0], it.cur.key...), append(it.value[:0], it.cur.value...)
		}
		it.n++
		return true
	}
}

func (it *tableIter) Key() []byte   { return it.key }
func (it *tableIter) Value() []byte { return it.value }
