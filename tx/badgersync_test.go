package tx

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// The syncer covers the files Badger rotated away from since the last sync
// (DB.Sync would miss them), and skips them once synced.
func TestBadgerSyncerCoversRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	db, s, got := openSyncerTest(t, badger.DefaultOptions(dir).
		WithMemTableSize(1<<20).WithNumMemtables(5).WithNumLevelZeroTables(10).
		WithNumLevelZeroTablesStall(20).WithValueThreshold(1<<10).WithValueLogFileSize(1<<20))
	logFiles := func() (all []string, newest map[string]string) {
		newest = map[string]string{}
		for _, kind := range []string{".mem", ".vlog"} {
			m, _ := filepath.Glob(filepath.Join(dir, "*"+kind))
			slices.Sort(m) // fids are zero-padded: name order is fid order
			all = append(all, m...)
			if len(m) > 0 {
				newest[kind] = m[len(m)-1]
			}
		}
		slices.Sort(all)
		return all, newest
	}
	write := writer(t, db, 4<<10)
	write(3 << 20) // several value-log files
	all, newest := logFiles()
	if len(all) < 3 {
		t.Fatalf("no rotation to test: %v", all)
	}
	// A listing right after a change in the directory cannot trust its
	// modification time (coarse clock): let it age for the skip below.
	time.Sleep(2 * mtimeSlack)
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(*got)
	if !slices.Equal(*got, all) {
		t.Fatalf("first sync covered %v, want every log file %v", *got, all)
	}
	// Nothing written since: only the files Badger still writes.
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(*got)
	want := []string{newest[".mem"], newest[".vlog"]}
	slices.Sort(want)
	if !slices.Equal(*got, want) {
		t.Fatalf("second sync covered %v, want only the current files %v", *got, want)
	}
	if s.listings != 1 {
		t.Fatalf("%d directory listings: without a rotation the second sync must not list", s.listings)
	}
	// After more rotations the files that were current are synced again:
	// writes may have reached them after the last sync.
	write(2 << 20)
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	for _, p := range want {
		if _, err := os.Stat(p); err == nil && !slices.Contains(*got, p) {
			t.Fatalf("sync after rotation covered %v, missing %s (current at the last sync)", *got, p)
		}
	}
	if s.listings != 2 {
		t.Fatalf("%d directory listings: a rotation must be noticed and listed once", s.listings)
	}
	if err := SyncBadger(db); err != nil {
		t.Fatal(err)
	}
}

// Two memtable rotations and a flush between syncs leave no file named after
// the last listed one (it and the next were flushed and deleted) and a newer
// current one: the next sync must find and sync it.
func TestBadgerSyncerDoubleRotationWithFlush(t *testing.T) {
	dir := t.TempDir()
	db, s, got := openSyncerTest(t, badger.DefaultOptions(dir).
		WithMemTableSize(1<<20).WithNumMemtables(5).WithValueThreshold(1<<10))
	mems := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "*.mem"))
		slices.Sort(m)
		return m
	}
	write := writer(t, db, 512) // below the threshold: in the memtable and its WAL
	write(1 << 10)
	time.Sleep(2 * mtimeSlack)
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	first := mems()
	last := first[len(first)-1]
	next := filepath.Join(dir, fmt.Sprintf("%05d.mem", s.current[".mem"].fid+1))
	// Rotate at least twice, then wait for the flushes to delete the file
	// after the last listed one.
	write(3 << 20)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(next); os.IsNotExist(err) && mems()[len(mems())-1] != last {
			if _, err := os.Stat(last); os.IsNotExist(err) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Badger did not flush the memtables within 20 s (files %v)", mems())
		}
		write(64 << 10)
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * mtimeSlack)
	now := mems()
	newest := now[len(now)-1]
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(*got, newest) {
		t.Fatalf("sync after two rotations and a flush covered %v, not the current WAL %s (last listed %s)", *got, newest, last)
	}
}

// openSyncerTest opens a DB with o and a syncer on it whose syncs record
// their files in *got; both close with the test.
func openSyncerTest(t *testing.T, o badger.Options) (*badger.DB, *badgerSyncer, *[]string) {
	t.Helper()
	db, err := badger.Open(o.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s := newBadgerSyncer(db)
	t.Cleanup(s.close)
	got := new([]string)
	s.synced = func(paths []string) { *got = slices.Clone(paths) }
	return db, s, got
}

// writer returns a function writing about bytes to db in values of size
// bytes each, one transaction per value, under fresh keys.
func writer(t *testing.T, db *badger.DB, size int) func(bytes int) {
	n := 0
	value := make([]byte, size)
	return func(bytes int) {
		t.Helper()
		for written := 0; written < bytes; written += size {
			n++
			if err := db.Update(func(txn *badger.Txn) error {
				return txn.Set(binary.BigEndian.AppendUint64(nil, uint64(n)), value)
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
