package tx

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
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

// Value-log files are synced before WALs: a WAL entry points into the value
// log, so a WAL synced first could outlive the values it points to.
func TestBadgerSyncerValueLogFirst(t *testing.T) {
	dir := t.TempDir()
	db, s, _ := openSyncerTest(t, badger.DefaultOptions(dir).WithValueThreshold(1<<10))
	var mu sync.Mutex
	var events []string // "start .vlog", "end .mem", ...
	note := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	s.syncFile = func(f *os.File) error {
		note("start " + filepath.Ext(f.Name()))
		defer note("end " + filepath.Ext(f.Name()))
		time.Sleep(5 * time.Millisecond) // a slow disk: overlaps would show
		return fdatasync(f)
	}
	writer(t, db, 4<<10)(16 << 10) // values in the value log, pointers in the WAL
	if err := s.sync(); err != nil {
		t.Fatal(err)
	}
	firstWAL := slices.Index(events, "start .mem")
	lastValueLog := slices.Index(events, "end .vlog")
	for i, e := range events {
		if e == "end .vlog" {
			lastValueLog = i
		}
	}
	if firstWAL < 0 || lastValueLog < 0 || firstWAL < lastValueLog {
		t.Fatalf("sync events %v: want every value-log sync finished before any WAL sync starts", events)
	}
}

// SyncHooks syncs the WAL Badger is leaving (and the value log) when it
// starts a new memtable, before anything is written to the new one. The
// hook knows the rotation by Badger's debug message: if a Badger upgrade
// changes it, no rotation is seen here.
func TestSyncHooksRotation(t *testing.T) {
	dir := t.TempDir()
	o := SyncHooks(badger.DefaultOptions(dir).WithLogger(nil).
		WithMemTableSize(1 << 20).WithNumMemtables(5).WithNumLevelZeroTables(10).
		WithNumLevelZeroTablesStall(20).WithValueThreshold(1 << 10).WithValueLogFileSize(1 << 20))
	r := o.Logger.(*syncHooks)
	newest := func(kind string) string {
		m, _ := filepath.Glob(filepath.Join(dir, "*"+kind))
		slices.Sort(m) // zero-padded fids: name order is fid order
		if len(m) == 0 {
			return ""
		}
		return m[len(m)-1]
	}
	var leaving []string // the WAL being left, at each rotation
	r.syncer.synced = func(paths []string) {
		mem, vlog := newest(".mem"), newest(".vlog")
		if !slices.Contains(paths, mem) || !slices.Contains(paths, vlog) {
			t.Errorf("sync at rotation covered %v, not the current WAL %s and value log %s", paths, mem, vlog)
		}
		leaving = append(leaving, mem)
	}
	db, err := badger.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	small, large := writer(t, db, 512), writer(t, db, 4<<10)
	small(2 << 20) // under the threshold: into the WAL, which rotates
	vlogs, _ := filepath.Glob(filepath.Join(dir, "*.vlog"))
	large(3 << 20) // into the value log, which moves on to new files meanwhile
	small(2 << 20)
	if now, _ := filepath.Glob(filepath.Join(dir, "*.vlog")); len(now) < len(vlogs)+2 {
		t.Fatalf("value-log files %v → %v: no value-log rotation between memtable rotations to test", vlogs, now)
	}
	if r.rotations.Load() < 3 {
		t.Fatalf("%d syncs at rotation after writing 4 memtables' worth: Badger's rotation message changed?", r.rotations.Load())
	}
	for i := 1; i < len(leaving); i++ {
		if leaving[i] <= leaving[i-1] {
			t.Fatalf("rotations left %v: each must leave a newer WAL", leaving)
		}
	}
	// Under Badger's DB lock: the directory (all the tables too) is listed
	// at the first rotation only; later ones find their files by name.
	if n := r.syncer.listings; n != 1 {
		t.Fatalf("%d directory listings in %d syncs at rotation, want 1", n, r.rotations.Load())
	}
	if err := r.failure(); err != nil {
		t.Fatal(err)
	}
}

// While a log sync runs (it holds the gate), Badger's writer may write
// values but waits before a batch's WAL entries: a write does not return
// until the sync ends. The hook knows the place by Badger's debug message.
func TestSyncHooksGate(t *testing.T) {
	db, err := badger.Open(badgerTestOptions(t.TempDir(), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h := hooksOf(db)
	write := func(k string) error {
		return db.Update(func(txn *badger.Txn) error { return txn.Set([]byte(k), make([]byte, 4<<10)) })
	}
	if err := write("before"); err != nil { // the gate is open
		t.Fatal(err)
	}
	h.gate.Lock() // a sync running
	done := make(chan error, 1)
	go func() { done <- write("during") }()
	select {
	case err := <-done:
		t.Fatalf("a write went through while a log sync held the gate (err %v): Badger's message %q changed?", err, badgerWALPhase)
	case <-time.After(100 * time.Millisecond):
	}
	h.gate.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
