package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// fakeClock is a settable clock for timeout tests.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func mustOpen(t testing.TB, o Options) *Coordinator {
	t.Helper()
	if o.ExpiryInterval == 0 {
		o.ExpiryInterval = -1
	}
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// badgerTestOptions: a DB for BadgerLog tests, deferred commits included
// (SyncHooks; without it they commit durably).
func badgerTestOptions(dir string, sync bool) badger.Options {
	return SyncHooks(badger.DefaultOptions(dir).WithLogger(nil).WithSyncWrites(sync).
		WithMemTableSize(16 << 20).WithNumMemtables(2).WithValueThreshold(1 << 10).WithBlockCacheSize(8 << 20))
}

func openBadger(t testing.TB, dir string, sync bool) *badger.DB {
	t.Helper()
	db, err := badger.Open(badgerTestOptions(dir, sync))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// table is a versioned key-value table in Badger used as a test participant.
// Key layout: prefix | key | ^writePointer (newest version first).
// Value: 8-byte little-endian integer; a tombstone is an empty value.
type table struct {
	db     *badger.DB
	prefix string
	tx     *Tx

	mu        sync.Mutex
	buf       map[string]int64
	persisted [][]byte
}

func newTable(db *badger.DB, prefix string) *table {
	return &table{db: db, prefix: prefix, buf: map[string]int64{}}
}

func (tb *table) versionKey(key string, wp uint64) []byte {
	k := append([]byte(tb.prefix), key...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, ^wp)
}

// Get returns the newest value of key visible to the current tx, its version,
// and whether it exists.
func (tb *table) Get(key string) (int64, uint64, bool, error) {
	if v, ok := tb.buf[key]; ok {
		return v, tb.tx.WritePointer, true, nil
	}
	var val int64
	var ver uint64
	found := false
	prefix := append(append([]byte(tb.prefix), key...), 0)
	err := tb.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			wp := ^binary.BigEndian.Uint64(k[len(k)-8:])
			if !tb.tx.Visible(wp) {
				continue
			}
			return it.Item().Value(func(v []byte) error {
				if len(v) == 8 {
					val, ver, found = int64(binary.LittleEndian.Uint64(v)), wp, true
				}
				return nil
			})
		}
		return nil
	})
	return val, ver, found, err
}

func (tb *table) Put(key string, v int64) { tb.buf[key] = v }

func (tb *table) StartTx(tx *Tx) error {
	tb.tx = tx
	clear(tb.buf)
	tb.persisted = tb.persisted[:0]
	return nil
}
func (tb *table) UpdateTx(tx *Tx) error { tb.tx = tx; return nil }
func (tb *table) ChangeKeys() [][]byte {
	keys := make([][]byte, 0, len(tb.buf))
	for k := range tb.buf {
		keys = append(keys, []byte(tb.prefix+k))
	}
	return keys
}
func (tb *table) writes() []Write {
	var ws []Write
	for k, v := range tb.buf {
		ws = append(ws, Write{Key: tb.versionKey(k, tb.tx.WritePointer), Value: binary.LittleEndian.AppendUint64(nil, uint64(v))})
	}
	return ws
}
func (tb *table) Persist() error {
	return tb.db.Update(func(txn *badger.Txn) error {
		for _, w := range tb.writes() {
			if err := txn.Set(w.Key, w.Value); err != nil {
				return err
			}
			tb.persisted = append(tb.persisted, w.Key)
		}
		return nil
	})
}
func (tb *table) PostCommit() { clear(tb.buf) }
func (tb *table) Rollback() error {
	clear(tb.buf)
	if len(tb.persisted) == 0 {
		return nil
	}
	err := tb.db.Update(func(txn *badger.Txn) error {
		for _, k := range tb.persisted {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	tb.persisted = tb.persisted[:0]
	return err
}

// stagedTable is a table that also stages, taking the fast path.
type stagedTable struct{ *table }

func (st stagedTable) Store() any { return st.db }
func (st stagedTable) Stage(dst []Write) ([]Write, error) {
	return append(dst, st.writes()...), nil
}

// recorder is a participant that records the calls it gets and can fail.
type recorder struct {
	calls                     []string
	failPersist, failRollback bool
	startErr                  error
	keys                      [][]byte
}

func (r *recorder) StartTx(*Tx) error    { r.calls = append(r.calls, "start"); return r.startErr }
func (r *recorder) UpdateTx(*Tx) error   { r.calls = append(r.calls, "update"); return nil }
func (r *recorder) ChangeKeys() [][]byte { r.calls = append(r.calls, "changes"); return r.keys }
func (r *recorder) Persist() error {
	r.calls = append(r.calls, "persist")
	if r.failPersist {
		return errors.New("disk on fire")
	}
	return nil
}
func (r *recorder) PostCommit() { r.calls = append(r.calls, "postcommit") }
func (r *recorder) Rollback() error {
	r.calls = append(r.calls, "rollback")
	if r.failRollback {
		return errors.New("cannot undo")
	}
	return nil
}

// openSmallSegments opens a coordinator on a FileLog in dir whose segments
// roll every 4 KiB, without expiry sweeps or snapshots of its own, so that
// a few hundred commits spread over several segments.
func openSmallSegments(t *testing.T, dir string, sync bool) *Coordinator {
	t.Helper()
	l, err := OpenFileLog(dir, FileLogOptions{Sync: sync, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Log: l, ExpiryInterval: -1, SnapshotEvery: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// errOrPanic runs f and returns its error, or a panic's value as one: a
// refusal test then fails on a panic instead of dying with it.
func errOrPanic(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}
