package state

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// GCStats says what a GC pass did.
type GCStats struct {
	Keys    int // user keys examined
	Deleted int // versions deleted
	Folded  int // counter deltas folded into a base
	// Damaged counts the keys left alone because a value a read needs does
	// not decode (see DamagedError), or because the stored key is not one
	// a Store writes.
	Damaged int
}

// GC removes the versions of the flowlet's tables and counters that no reader
// can need any more and returns what it did. Results of every read are the
// same before and after.
//
// bound must be safe: every version below it is settled (its transaction
// committed, or is in invalid), no version below it will be written again,
// and every transaction still in progress sees every committed version below
// it. A transaction's own FirstInProgress is not enough, because an older
// transaction may still be running; Watermark computes a safe bound from the
// coordinator. invalid is the coordinator's invalid list, sorted
// (Coordinator.InvalidList).
//
// Below bound, GC deletes versions of invalid transactions; in a table it
// keeps only the newest committed version of each key (none if that is a
// delete); in a counter table it folds the committed deltas into one base
// value at the newest of them. Versions at or above bound are never
// touched. A pass holds a key or two at a time, however many versions a key
// has, and writes in many Badger transactions; reads are the same after
// each (a fold's base lands before or with the deletions it covers; a
// table's newest delete goes last), so GC may run concurrently with steps,
// with other GC passes, and be interrupted at any point.
//
// A key with a value that does not decode where a read would decode it (a
// counter's down to its newest base, a table's newest) keeps every
// committed version, and a stored key no Store writes (too short) is left
// as it is; the pass goes on with the other keys. It then returns its
// stats with an error that wraps the first such key's *DamagedError (and
// ErrDamaged), or names the stray key.
func (s *Store) GC(bound uint64, invalid []uint64) (GCStats, error) {
	return s.gc(newGCBatch(s.db), bound, invalid)
}

func (s *Store) gc(g *gcBatch, bound uint64, invalid []uint64) (GCStats, error) {
	var st GCStats
	defer g.discard()
	var damaged error // the first key skipped
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: s.prefix, PrefetchValues: false})
		defer it.Close()
		w := &gcWalk{s: s, g: g, st: &st, it: it, bound: bound, invalid: invalid}
		for it.Rewind(); it.Valid(); {
			err := w.key()
			if errors.Is(err, ErrDamaged) || errors.Is(err, errBadKey) {
				st.Damaged++
				if damaged == nil {
					damaged = err
				}
				continue
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = g.commit()
	}
	if err == nil && damaged != nil {
		err = fmt.Errorf("state: GC skipped %d damaged key(s) and did the rest; the first: %w", st.Damaged, damaged)
	}
	return st, err
}

// gcWalk is one pass's walk over the flowlet's versions, one user key at a
// time, newest version first. It holds no more than a key or two at a
// time: a hot key may have any number of versions.
type gcWalk struct {
	s       *Store
	g       *gcBatch
	st      *GCStats
	it      *badger.Iterator
	bound   uint64
	invalid []uint64

	enc    []byte // the current user key, encoded
	start  []byte // its first version below bound
	newest []byte // its newest settled version below bound
}

// same reports whether the iterator is still on the current user key.
func (w *gcWalk) same() bool {
	return w.it.Valid() && bytes.Equal(encodedUserKey(w.it.Item().Key()), w.enc)
}

func (w *gcWalk) wp() uint64 {
	k := w.it.Item().Key()
	return ^beUint64(k[len(k)-versionLen:])
}

func (w *gcWalk) isInvalid(wp uint64) bool {
	_, bad := slices.BinarySearch(w.invalid, wp)
	return bad
}

// skip moves past the current user key.
func (w *gcWalk) skip() {
	for w.same() {
		w.it.Next()
	}
}

// del deletes the version at the iterator.
func (w *gcWalk) del() error {
	w.st.Deleted++
	return w.g.apply(nil, nil, [][]byte{w.it.Item().KeyCopy(nil)})
}

// key rewrites the versions below bound of the user key at the iterator and
// leaves the iterator at the next user key. A key with a value that does not
// decode is left alone (the error wraps ErrDamaged), and so is a stored key
// no Store writes (errBadKey).
func (w *gcWalk) key() error {
	if err := w.s.closedErr(); err != nil {
		return err // see gcBatch.apply
	}
	k := w.it.Item().Key()
	if len(k) < len(w.s.prefix)+1+termLen+versionLen {
		// No Store wrote it: left alone, as a damaged value.
		err := fmt.Errorf("%w %q", errBadKey, k)
		w.it.Next()
		return err
	}
	w.enc = append(w.enc[:0], encodedUserKey(k)...)
	w.st.Keys++
	counter := k[len(w.s.prefix)] == kindCounter
	// Versions at or above bound come first, and are never touched, so
	// not held: while an old transaction holds the bound, a hot key's
	// versions above it pile up.
	for w.same() && w.wp() >= w.bound {
		w.it.Next()
	}
	if !w.same() {
		return nil
	}
	if counter {
		return w.counter()
	}
	return w.table()
}

// table keeps the newest settled version, unless it is a delete. Every
// version older than it is shadowed, and so is that one if it is a delete.
// With that delete deleted last, reads stay unchanged at every point, so
// they need no atomicity (the delete gone first would show an older value).
func (w *gcWalk) table() error {
	var tomb []byte
	seen := false
	for ; w.same(); w.it.Next() {
		switch {
		case w.isInvalid(w.wp()) || seen:
			if err := w.del(); err != nil {
				return err
			}
		default:
			seen = true
			var err error
			if tomb, err = w.tombstone(); err != nil {
				if errors.Is(err, ErrDamaged) {
					w.skip()
				}
				return err
			}
		}
	}
	if tomb == nil {
		return nil
	}
	w.st.Deleted++
	return w.g.apply(nil, nil, [][]byte{tomb})
}

// tombstone returns a copy of the key at the iterator if its value is a
// table's delete.
func (w *gcWalk) tombstone() ([]byte, error) {
	item := w.it.Item()
	var tomb []byte
	err := item.Value(func(b []byte) error {
		_, live, err := decodeTable(b)
		if err == nil && !live {
			tomb = item.KeyCopy(nil)
		}
		return err
	})
	return tomb, w.s.damagedAt(item.Key(), err)
}

// counter folds the settled deltas below bound into one base at the newest
// of them, in two walks over the key's versions. The first sums them, down
// to the newest settled base (which holds every older delta); then the base
// is written, before or with the deletion of anything it covers. Every
// reader sees every settled version below bound, so from then on it stops
// at that base: reads are the same after each Badger commit, however many
// the deletions take. Versions of invalid transactions are invisible to
// everyone and go too.
func (w *gcWalk) counter() error {
	w.start = w.it.Item().KeyCopy(w.start[:0])
	w.newest = w.newest[:0]
	var sum int64
	var newestTag byte
	settled, summed, work, summing := 0, 0, false, true
	for ; w.same(); w.it.Next() {
		if w.isInvalid(w.wp()) {
			work = true
			continue
		}
		if settled++; settled == 1 {
			w.newest = w.it.Item().KeyCopy(w.newest[:0])
		} else {
			work = true
		}
		if !summing {
			continue // in the base summed already
		}
		tag, n, err := w.count()
		if err != nil {
			if errors.Is(err, ErrDamaged) {
				w.skip()
			}
			return err
		}
		if settled == 1 {
			newestTag = tag
		}
		sum += n
		summed++
		summing = tag != tagBase
	}
	if !work {
		return nil
	}
	if settled > 1 && newestTag != tagBase {
		// A copy: Badger holds the key until the commit.
		if err := w.g.apply(bytes.Clone(w.newest), encodeCount(tagBase, sum), nil); err != nil {
			return err
		}
		w.st.Folded += summed
	}
	w.it.Seek(w.start)
	for ; w.same(); w.it.Next() {
		if w.isInvalid(w.wp()) || !bytes.Equal(w.it.Item().Key(), w.newest) {
			if err := w.del(); err != nil {
				return err
			}
		}
	}
	return nil
}

// count decodes the counter value at the iterator.
func (w *gcWalk) count() (tag byte, n int64, err error) {
	item := w.it.Item()
	err = item.Value(func(b []byte) error {
		tag, n, err = decodeCount(b)
		return err
	})
	return tag, n, w.s.damagedAt(item.Key(), err)
}

// gcEntrySize is what one set or delete of key costs in a Badger
// transaction, overestimated (Badger counts a few bytes of metadata).
func gcEntrySize(key []byte) int {
	if key == nil {
		return 0
	}
	return len(key) + 9 + 32
}

// gcBatch groups the sets and deletes of a pass into Badger transactions,
// each well within what Badger takes, committed in the order they were
// made.
type gcBatch struct {
	db       *badger.DB
	maxBytes int // of one transaction, well within what Badger takes
	txn      *badger.Txn
	ops      int
	bytes    int
	// beforeCommit, in tests, fails a commit: a pass cut between two;
	// afterCommit runs after each commit.
	beforeCommit func() error
	afterCommit  func()
}

const (
	gcOpsPerTxn   = 1000
	gcBytesPerTxn = 512 << 10
)

func newGCBatch(db *badger.DB) *gcBatch {
	// Badger takes 15% of a memtable in one transaction; half of it
	// leaves room for its own accounting.
	return &gcBatch{db: db, maxBytes: int(min(gcBytesPerTxn, db.Opts().MemTableSize*15/100/2))}
}

func (g *gcBatch) apply(set, val []byte, dels [][]byte) error {
	size, ops := gcEntrySize(set)+len(val), len(dels)
	if set != nil {
		ops++
	}
	for _, k := range dels {
		size += gcEntrySize(k)
	}
	if g.txn != nil && (g.ops+ops > gcOpsPerTxn || g.bytes+size > g.maxBytes) {
		if err := g.commit(); err != nil {
			return err
		}
	}
	if g.db.IsClosed() {
		// Closed under the pass (a shutdown): the pass's iterator would
		// read its unmapped tables next, a fault that kills the process.
		return g.fail(badger.ErrDBClosed)
	}
	if g.txn == nil {
		g.txn = g.db.NewTransaction(true)
		g.ops, g.bytes = 0, 0
	}
	g.ops += ops
	g.bytes += size
	if set != nil {
		if err := g.txn.Set(set, val); err != nil {
			return g.fail(err)
		}
	}
	for _, k := range dels {
		if err := g.txn.Delete(k); err != nil {
			return g.fail(err)
		}
	}
	return nil
}

// fail drops the open transaction: none of its rewrites happen, which only
// leaves garbage for the next pass.
func (g *gcBatch) fail(err error) error {
	g.discard()
	return fmt.Errorf("state: GC: %w", err)
}

func (g *gcBatch) commit() error {
	if g.txn == nil {
		return nil
	}
	if g.beforeCommit != nil {
		if err := g.beforeCommit(); err != nil {
			return g.fail(err)
		}
	}
	err := g.txn.Commit()
	g.txn = nil
	if err != nil {
		return fmt.Errorf("state: GC: %w", err)
	}
	if g.afterCommit != nil {
		g.afterCommit()
	}
	return nil
}

func (g *gcBatch) discard() {
	if g.txn != nil {
		g.txn.Discard()
		g.txn = nil
	}
}
