package state

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/tx"
)

// ErrNoTransaction is returned when a table is used outside a transaction.
var ErrNoTransaction = errors.New("state: no transaction in progress")

// Store holds the state of one flowlet of one app, as one tx participant. It
// is used by one goroutine at a time (one flowlet instance); other instances
// of the same flowlet open their own Store on the same DB.
type Store struct {
	db     *badger.DB
	prefix []byte

	tx   *tx.Tx
	rtxn *badger.Txn // lazily opened read view for the current step
	// scans are the step's open iterators on rtxn, closed at its end.
	scans []*merge

	tables   map[string]*Table
	counters map[string]*Counters
	// dirty lists the tables and counters written in the current step.
	dirtyTables   []*Table
	dirtyCounters []*Counters

	persisted [][]byte // keys written by Persist, for Rollback
}

var (
	_ tx.Stager = (*Store)(nil)
)

// Open returns the Store of flowlet in app. Names follow the app YAML's rule
// ([a-z0-9][a-z0-9_-]{0,62}).
func Open(db *badger.DB, app, flowletName string) (*Store, error) {
	if db == nil {
		return nil, errors.New("state: nil DB")
	}
	for _, n := range []string{app, flowletName} {
		if !flowlet.ValidStateName(n) {
			return nil, fmt.Errorf("state: %w: app or flowlet %q (want [a-z0-9][a-z0-9_-]{0,62})", flowlet.ErrInvalidName, n)
		}
	}
	return &Store{
		db:       db,
		prefix:   KeyPrefix(app, flowletName),
		tables:   map[string]*Table{},
		counters: map[string]*Counters{},
	}, nil
}

// KeyPrefix is the prefix of every key of the flowlet's state.
func KeyPrefix(app, flowlet string) []byte {
	return []byte(Prefix + app + "/" + flowlet + "/")
}

func (s *Store) namePrefix(kind byte, name string) []byte {
	p := append([]byte(nil), s.prefix...)
	p = append(p, kind)
	p = append(p, name...)
	return append(p, 0)
}

// space is the key range of the table or counters (what) of that name. An
// invalid name gives a space whose every operation fails.
func (s *Store) space(kind byte, what, name string) space {
	sp := space{s: s, kind: what, name: name, prefix: s.namePrefix(kind, name)}
	if !flowlet.ValidStateName(name) {
		sp.err = fmt.Errorf("state: %w: %s %q (want [a-z0-9][a-z0-9_-]{0,62})", flowlet.ErrInvalidName, what, name)
	}
	return sp
}

// Table returns the table of that name. An invalid name gives a table whose
// every operation fails.
func (s *Store) Table(name string) *Table {
	if t, ok := s.tables[name]; ok {
		return t
	}
	t := &Table{space: s.space(kindTable, "table", name), buf: map[string]tableWrite{}}
	s.tables[name] = t
	return t
}

// Counters returns the counter table of that name.
func (s *Store) Counters(name string) *Counters {
	if c, ok := s.counters[name]; ok {
		return c
	}
	c := &Counters{space: s.space(kindCounter, "counters", name), buf: map[string]int64{}}
	s.counters[name] = c
	return c
}

// view returns the step's Badger read view.
func (s *Store) view() (*badger.Txn, error) {
	if s.tx == nil {
		return nil, ErrNoTransaction
	}
	if err := s.closedErr(); err != nil {
		return nil, err
	}
	if s.rtxn == nil {
		s.rtxn = s.db.NewTransaction(false)
	}
	return s.rtxn, nil
}

// closedErr reports a DB closed under the Store (a read racing a shutdown):
// Badger panics on an iterator of a closed DB, and its WriteBatch waits
// for good.
func (s *Store) closedErr() error {
	if s.db.IsClosed() {
		return fmt.Errorf("state: %w", badger.ErrDBClosed)
	}
	return nil
}

func (s *Store) reset() {
	for _, m := range s.scans {
		m.end()
	}
	clear(s.scans)
	s.scans = s.scans[:0]
	if s.rtxn != nil {
		s.rtxn.Discard()
		s.rtxn = nil
	}
	for _, t := range s.dirtyTables {
		clear(t.buf)
		t.dirty = false
	}
	for _, c := range s.dirtyCounters {
		clear(c.buf)
		c.dirty = false
	}
	s.dirtyTables = s.dirtyTables[:0]
	s.dirtyCounters = s.dirtyCounters[:0]
}

// StartTx implements tx.Participant.
func (s *Store) StartTx(t *tx.Tx) error {
	s.reset()
	s.persisted = s.persisted[:0]
	s.tx = t
	return nil
}

// UpdateTx implements tx.Participant. Writes are buffered until commit and
// then carry the newest write pointer.
func (s *Store) UpdateTx(t *tx.Tx) error {
	s.tx = t
	return nil
}

// ChangeKeys implements tx.Participant: table and key of every Put and
// Delete. Counter increments report none, so they never conflict.
func (s *Store) ChangeKeys() [][]byte {
	var keys [][]byte
	for _, t := range s.dirtyTables {
		for k := range t.buf {
			ck := make([]byte, 0, len(t.prefix)+len(k)+4)
			ck = append(ck, t.prefix...)
			keys = append(keys, appendEscaped(ck, []byte(k)))
		}
	}
	return keys
}

// Store implements tx.Stager: the *badger.DB.
func (s *Store) Store() any { return s.db }

// Stage implements tx.Stager: it appends the versioned writes of the step.
func (s *Store) Stage(dst []tx.Write) ([]tx.Write, error) {
	if s.tx == nil {
		return dst, ErrNoTransaction
	}
	wp := s.tx.WritePointer
	for _, t := range s.dirtyTables {
		for k, w := range t.buf {
			v := make([]byte, 1+len(w.value))
			if w.del {
				v = v[:1]
				v[0] = tagTombstone
			} else {
				v[0] = tagValue
				copy(v[1:], w.value)
			}
			dst = append(dst, tx.Write{Key: t.versionKey([]byte(k), wp), Value: v})
		}
	}
	for _, c := range s.dirtyCounters {
		for k, d := range c.buf {
			if d == 0 {
				continue
			}
			dst = append(dst, tx.Write{Key: c.versionKey([]byte(k), wp), Value: encodeCount(tagDelta, d)})
		}
	}
	return dst, nil
}

// Persist implements tx.Participant (the path without an atomic log).
func (s *Store) Persist() error {
	writes, err := s.Stage(nil)
	if err != nil || len(writes) == 0 {
		return err
	}
	if err := s.closedErr(); err != nil {
		return err
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, w := range writes {
		s.persisted = append(s.persisted, w.Key)
		if err := wb.Set(w.Key, w.Value); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// PostCommit implements tx.Participant.
func (s *Store) PostCommit() {
	s.reset()
	s.persisted = s.persisted[:0]
	s.tx = nil
}

// Rollback implements tx.Participant: it drops buffered writes and deletes
// persisted ones.
func (s *Store) Rollback() error {
	s.reset()
	s.tx = nil
	if len(s.persisted) == 0 {
		return nil
	}
	if err := s.closedErr(); err != nil {
		return err
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range s.persisted {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	s.persisted = s.persisted[:0]
	return nil
}

// Close releases the read view. The Store must not be in a transaction.
func (s *Store) Close() error {
	s.reset()
	s.tx = nil
	return nil
}
