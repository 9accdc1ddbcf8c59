package state

import (
	"bytes"
	"encoding/binary"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
)

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// resolved is the value of one user key as the step's snapshot sees it.
type resolved struct {
	key    []byte
	value  []byte // tables
	exists bool   // tables: a live value; counters: any visible delta
	count  int64  // counters
}

// cursor walks the user keys of one table in order, folding each key's
// visible versions (newest first) into a resolved value.
type cursor struct {
	it     *badger.Iterator
	s      *Store
	prefix []byte // table prefix
	opts   flowlet.ScanOptions
	fold   func(v []byte) (stop bool, err error)
	cur    *resolved
	enc    []byte
	ready  bool
	done   bool
	err    error
}

func newCursor(rt *badger.Txn, s *Store, prefix []byte, opts flowlet.ScanOptions,
	fold func([]byte) (bool, error), cur *resolved) *cursor {
	p := appendEscaped(append([]byte(nil), prefix...), opts.Prefix)
	it := rt.NewIterator(badger.IteratorOptions{Prefix: p, PrefetchValues: false})
	seek := p
	if opts.Start != nil && bytes.Compare(opts.Start, opts.Prefix) > 0 {
		seek = appendEscaped(append([]byte(nil), prefix...), opts.Start)
	}
	it.Seek(seek)
	return &cursor{it: it, s: s, prefix: prefix, opts: opts, fold: fold, cur: cur}
}

// peek makes the next user key with a visible version current, and reports
// whether there is one.
func (c *cursor) peek() bool {
	if c.ready {
		return true
	}
	if c.done || c.err != nil {
		return false
	}
	for c.it.Valid() {
		k := c.it.Item().Key()[len(c.prefix):]
		var err error
		c.cur.key, _, err = splitKey(c.cur.key[:0], k)
		if err != nil {
			c.err = err
			return false
		}
		if c.opts.End != nil && bytes.Compare(c.cur.key, c.opts.End) >= 0 {
			break
		}
		match := c.opts.Match(c.cur.key)
		c.enc = append(c.enc[:0], encodedUserKey(k)...)
		c.cur.exists, c.cur.count, c.cur.value = false, 0, c.cur.value[:0]
		visible, stopped := false, false
		for ; c.it.Valid(); c.it.Next() {
			k := c.it.Item().Key()[len(c.prefix):]
			if !bytes.Equal(encodedUserKey(k), c.enc) {
				break
			}
			if !match || stopped || !c.s.tx.Visible(^beUint64(k[len(k)-versionLen:])) {
				continue
			}
			visible = true
			if err := c.it.Item().Value(func(v []byte) error {
				var err error
				stopped, err = c.fold(v)
				return err
			}); err != nil {
				c.err = c.s.damagedAt(c.it.Item().Key(), err)
				return false
			}
		}
		if visible {
			c.ready = true
			return true
		}
	}
	c.done = true
	return false
}

func (c *cursor) consume() { c.ready = false }

func (c *cursor) close() { c.it.Close() }
