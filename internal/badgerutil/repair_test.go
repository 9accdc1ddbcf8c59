package badgerutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// A zero-length value log (a crash right after its creation) must not keep
// the DB from opening, and nothing committed before may be lost.
func TestRemoveEmptyLogFiles(t *testing.T) {
	dir := t.TempDir()
	opts := badger.DefaultOptions(dir).WithLogger(nil)
	db, err := badger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// What a crash leaves: the next value log created but not yet sized.
	if err := os.WriteFile(filepath.Join(dir, "000099.vlog"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := badger.Open(opts); err == nil {
		t.Fatal("expected Badger itself to refuse the empty value log; if it no longer does, this helper can go")
	}
	// Badger's failed open sized the file; a crash would have left it empty.
	if err := os.Truncate(filepath.Join(dir, "000099.vlog"), 0); err != nil {
		t.Fatal(err)
	}
	if err := RemoveEmptyLogFiles(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "000099.vlog")); !os.IsNotExist(err) {
		t.Fatalf("the empty value log is still there: %v", err)
	}
	db, err = badger.Open(opts)
	if err != nil {
		t.Fatalf("after repair: %v", err)
	}
	defer db.Close()
	err = db.View(func(txn *badger.Txn) error {
		_, err := txn.Get([]byte("k"))
		return err
	})
	if err != nil {
		t.Fatalf("committed key lost: %v", err)
	}
}

// The same for an empty memtable file.
func TestRemoveEmptyMemtable(t *testing.T) {
	dir := t.TempDir()
	opts := badger.DefaultOptions(dir).WithLogger(nil)
	db, err := badger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	mem := filepath.Join(dir, "00099.mem")
	if err := os.WriteFile(mem, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveEmptyLogFiles(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mem); !os.IsNotExist(err) {
		t.Fatalf("the empty memtable file is still there: %v", err)
	}
	db, err = badger.Open(opts)
	if err != nil {
		t.Fatalf("after repair: %v", err)
	}
	defer db.Close()
	if err := db.View(func(txn *badger.Txn) error { _, err := txn.Get([]byte("k")); return err }); err != nil {
		t.Fatalf("committed key lost: %v", err)
	}
}

// RepairBeforeOpen removes a crash's empty memtable file, but not while a
// process holds the DB open: its empty file may be one being created.
func TestRepairBeforeOpenRespectsTheLock(t *testing.T) {
	dir := t.TempDir()
	opts := badger.DefaultOptions(dir).WithLogger(nil)
	db, err := badger.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	mem := filepath.Join(dir, "00099.mem")
	if err := os.WriteFile(mem, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RepairBeforeOpen(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mem); err != nil {
		t.Fatalf("an empty file of an open DB was removed: %v", err)
	}
	db.Close()
	if err := os.Truncate(mem, 0); err != nil { // Close may not touch it; be sure
		t.Fatal(err)
	}
	if err := RepairBeforeOpen(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mem); !os.IsNotExist(err) {
		t.Fatalf("the empty memtable file of a closed DB is still there: %v", err)
	}
	db, err = badger.Open(opts)
	if err != nil {
		t.Fatalf("after repair: %v", err)
	}
	db.Close()
	if err := RepairBeforeOpen(filepath.Join(dir, "absent")); err != nil {
		t.Fatalf("a directory that does not exist: %v", err)
	}
}
