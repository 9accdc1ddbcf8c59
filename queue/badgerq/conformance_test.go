package badgerq

import (
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// testDB opens a DB with the tuned options, scaled down (small value-log
// files and memtables) so that space reclamation shows within a test.
func testDB(t testing.TB, dir string) *badger.DB {
	return testDBDurable(t, dir, false)
}

func testDBDurable(t testing.TB, dir string, durable bool) *badger.DB {
	db, err := badger.Open(TunedOptions(dir, durable).WithValueLogFileSize(4 << 20).WithMemTableSize(4 << 20))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				// Allocated blocks, not length: Badger preallocates sparse files.
				if st, ok := info.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				} else {
					n += info.Size()
				}
			}
		}
		return nil
	})
	return n
}

// newEnv opens a fresh backend; fast selects the single-store fast path
// (BadgerLog) or the general path (in-memory coordinator, Persist/Rollback);
// mods change the backend's options.
func newEnv(t *testing.T, fast bool, mods ...func(*Options)) *queuetest.Env {
	return newEnvDurable(t, fast, false, mods...)
}

// newEnvDurable is newEnv with durable (synced) commits and backend writes.
func newEnvDurable(t *testing.T, fast, durable bool, mods ...func(*Options)) *queuetest.Env {
	_, e := newBackendEnv(t, fast, durable, mods...)
	return e
}

// newBackendEnv is newEnvDurable that also returns the backend.
func newBackendEnv(t *testing.T, fast, durable bool, mods ...func(*Options)) (*Backend, *queuetest.Env) {
	dir := t.TempDir()
	db := testDBDurable(t, dir, durable)
	var log tx.Log
	if fast {
		bl, err := tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: durable})
		if err != nil {
			t.Fatal(err)
		}
		log = bl
	}
	coord, err := tx.Open(tx.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	// The clock runs with real time, plus what the test moved it by.
	var moved atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(moved.Load())) }
	opts := Options{Coordinator: coord, FastPath: fast, Sync: durable, EvictInterval: 20e6, ReclaimBytes: 4 << 20, GCInterval: 500e6, Now: now}
	for _, m := range mods {
		m(&opts)
	}
	b, err := Open(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		coord.Close()
		db.Close()
	})
	return b, &queuetest.Env{Queues: queue.New(b), Coord: coord, DiskBytes: func() int64 { return dirBytes(dir) },
		Advance: func(d time.Duration) { moved.Add(int64(d)) }}
}

func TestConformanceFastPath(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) *queuetest.Env { return newEnv(t, true) })
}

// Durable: the same suite with synced commits, SyncHooks and value-log GC
// that holds rewritten files until they are synced (gc).
func TestConformanceFastPathDurable(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) *queuetest.Env { return newEnvDurable(t, true, true) })
}

func TestConformanceGeneralPath(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) *queuetest.Env { return newEnv(t, false) })
}
