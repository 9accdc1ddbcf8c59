package state

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// GCStats says what a GC pass did.
type GCStats struct {
	Keys    int // user keys examined
	Deleted int // versions deleted
	Folded  int // counter deltas folded into a base
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
// value. Versions at or above bound are never touched. A key's rewrite may
// take several Badger transactions, but reads are the same after each (a
// fold's base and the deletions it covers land together; a table's newest
// delete goes last), so GC may run concurrently with steps, with other GC
// passes, and be interrupted at any point.
func (s *Store) GC(bound uint64, invalid []uint64) (GCStats, error) {
	return s.gc(newGCBatch(s.db), bound, invalid)
}

func (s *Store) gc(g *gcBatch, bound uint64, invalid []uint64) (GCStats, error) {
	var st GCStats
	defer g.discard()

	var group []gcVersion // one user key's versions below bound, newest first
	var enc []byte
	flush := func() error {
		if len(group) == 0 {
			return nil
		}
		err := s.gcKey(g, &st, group, invalid)
		group = group[:0]
		return err
	}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: s.prefix, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) < len(s.prefix)+1+termLen+versionLen {
				return fmt.Errorf("%w %q", errBadKey, k)
			}
			if !bytes.Equal(encodedUserKey(k), enc) {
				if err := flush(); err != nil {
					return err
				}
				enc = append(enc[:0], encodedUserKey(k)...)
				st.Keys++
			}
			wp := ^beUint64(k[len(k)-versionLen:])
			if wp >= bound {
				// Never touched, so not held: while an old transaction
				// holds the bound, a hot key's versions above it pile up.
				continue
			}
			v := gcVersion{key: item.KeyCopy(nil), wp: wp}
			counter := len(k) > len(s.prefix) && k[len(s.prefix)] == kindCounter
			if err := item.Value(func(b []byte) error {
				if counter {
					var err error
					v.tag, v.count, err = decodeCount(b)
					return err
				}
				if len(b) > 0 {
					v.tag = b[0]
				}
				return nil
			}); err != nil {
				return err
			}
			group = append(group, v)
		}
		return flush()
	})
	if err == nil {
		err = g.commit()
	}
	return st, err
}

type gcVersion struct {
	key   []byte
	wp    uint64
	tag   byte
	count int64
}

// gcChunk bounds the versions one atomic rewrite touches; gcBatch.maxBytes
// bounds their bytes.
const gcChunk = 256

func (s *Store) gcKey(g *gcBatch, st *GCStats, vs []gcVersion, invalid []uint64) error {
	counter := vs[0].key[len(s.prefix)] == kindCounter
	var dels [][]byte
	var settled []gcVersion // committed versions below bound, newest first
	for _, v := range vs {
		if _, bad := slices.BinarySearch(invalid, v.wp); bad {
			dels = append(dels, v.key)
			continue
		}
		settled = append(settled, v)
	}
	if !counter {
		// Every version older than the newest settled one is shadowed, and
		// so is that one if it is a delete. With that delete deleted last,
		// reads stay unchanged at every point, so they need no atomicity
		// (the delete gone first would show an older value).
		if len(settled) > 0 {
			for _, v := range settled[1:] {
				dels = append(dels, v.key)
			}
			if settled[0].tag == tagTombstone {
				dels = append(dels, settled[0].key)
			}
		}
		st.Deleted += len(dels)
		return g.deleteAll(dels)
	}
	// Invalid deltas are invisible to everyone: delete them freely.
	st.Deleted += len(dels)
	if err := g.deleteAll(dels); err != nil {
		return err
	}
	// Versions older than the newest settled base are already in it.
	for i, v := range settled {
		if v.tag == tagBase {
			var older [][]byte
			for _, o := range settled[i+1:] {
				older = append(older, o.key)
			}
			settled = settled[:i+1]
			st.Deleted += len(older)
			if err := g.deleteAll(older); err != nil {
				return err
			}
			break
		}
	}
	if len(settled) < 2 {
		return nil
	}
	// Fold from the oldest up, a chunk at a time: each chunk becomes a base
	// at its newest version, summing the chunk (and the base below it). A
	// reader sums visible versions newest first down to the first base, so
	// the result is the same after every chunk.
	var carry int64
	var prevBase []byte
	for end := len(settled); end > 0; {
		start := end - 1
		size := gcEntrySize(settled[start].key) + gcEntrySize(prevBase)
		for start > 0 && end-start < gcChunk {
			next := size + gcEntrySize(settled[start-1].key)
			if next > g.maxBytes {
				break
			}
			start, size = start-1, next
		}
		chunk := settled[start:end]
		sum := carry
		var cdels [][]byte
		for i, v := range chunk {
			sum += v.count
			if i > 0 {
				cdels = append(cdels, v.key)
			}
		}
		if prevBase != nil {
			cdels = append(cdels, prevBase)
		}
		if len(cdels) > 0 || chunk[0].tag != tagBase {
			if err := g.apply(chunk[0].key, encodeCount(tagBase, sum), cdels); err != nil {
				return err
			}
			st.Folded += len(chunk)
			st.Deleted += len(cdels)
		}
		carry, prevBase = sum, chunk[0].key
		end = start
	}
	return nil
}

// gcEntrySize is what one set or delete of key costs in a Badger
// transaction, overestimated (Badger counts a few bytes of metadata).
func gcEntrySize(key []byte) int {
	if key == nil {
		return 0
	}
	return len(key) + 9 + 32
}

// gcBatch groups the rewrites of many keys into Badger transactions; one
// rewrite (a set of a base and its deletions) is never split.
type gcBatch struct {
	db       *badger.DB
	maxBytes int // of one transaction, well within what Badger takes
	txn      *badger.Txn
	ops      int
	bytes    int
	// beforeCommit, in tests, fails a commit: a pass cut between two.
	beforeCommit func() error
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

// deleteAll deletes keys, in their order, in as many rewrites as they need.
func (g *gcBatch) deleteAll(keys [][]byte) error {
	for len(keys) > 0 {
		n, size := 1, gcEntrySize(keys[0])
		for n < len(keys) && n < gcChunk && size+gcEntrySize(keys[n]) <= g.maxBytes {
			size += gcEntrySize(keys[n])
			n++
		}
		if err := g.apply(nil, nil, keys[:n]); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

func (g *gcBatch) apply(set, val []byte, dels [][]byte) error {
	size := gcEntrySize(set) + len(val)
	for _, k := range dels {
		size += gcEntrySize(k)
	}
	if g.txn != nil && (g.ops+len(dels)+1 > gcOpsPerTxn || g.bytes+size > g.maxBytes) {
		if err := g.commit(); err != nil {
			return err
		}
	}
	if g.txn == nil {
		g.txn = g.db.NewTransaction(true)
		g.ops, g.bytes = 0, 0
	}
	g.ops += len(dels) + 1
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
	return nil
}

func (g *gcBatch) discard() {
	if g.txn != nil {
		g.txn.Discard()
		g.txn = nil
	}
}
