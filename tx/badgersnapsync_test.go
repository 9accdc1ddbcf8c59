package tx

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// A syncing BadgerLog's snapshot is durable before the log entries it
// covers are deleted: the deletions were written right after the snapshot
// with no sync between, so a power loss before the next group sync could
// keep them and lose the snapshot (Badger replays each memtable's
// write-ahead file on its own, and its large values live in another file):
// recovery then found an older snapshot, or one whose value was gone, with
// the synced entries after it deleted — commits acknowledged long before,
// lost.
func TestBadgerSnapshotSyncedBeforeDeletes(t *testing.T) {
	h := newSyncHeld(t)
	for range 3 {
		h.start(t)
		if err := h.ctx.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	l := h.l
	// At each sync: is the new snapshot written while an entry it covers
	// is still there?
	syncedBetween := false
	l.syncer.synced = func([]string) {
		err := l.db.View(func(txn *badger.Txn) error {
			item, err := txn.Get(l.snapKey())
			if err != nil {
				return err
			}
			b, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			payload, _, ok := nextFrame(b)
			if !ok || len(payload) < 8 {
				return errors.New("snapshot does not frame")
			}
			from := binary.BigEndian.Uint64(payload)
			if from == 0 {
				return nil
			}
			_, err = txn.Get(l.logKey(from - 1))
			syncedBetween = syncedBetween || err == nil
			return nil
		})
		if err != nil && !errors.Is(err, badger.ErrKeyNotFound) {
			t.Error(err)
		}
	}
	if err := h.c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	l.syncer.synced = nil
	if !syncedBetween {
		t.Fatal("the covered log entries were deleted before the snapshot was synced")
	}

	// A snapshot whose sync fails deletes nothing and fails the log, as a
	// failed group sync does: the disk may have dropped what it held.
	h.start(t)
	if err := h.ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	l.syncer.mu.Lock()
	l.syncer.syncFile = func(*os.File) error { return errors.New("disk gone") }
	l.syncer.mu.Unlock()
	l.mu.Lock()
	covered := l.seq - 1
	l.mu.Unlock()
	if err := h.c.Snapshot(); err == nil {
		t.Fatal("a snapshot whose sync failed returned nil")
	}
	if err := l.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(l.logKey(covered))
		return err
	}); err != nil {
		t.Fatalf("log entry %d after a snapshot whose sync failed: %v", covered, err)
	}
	l.syncer.mu.Lock()
	l.syncer.syncFile = fdatasync // a later sync succeeding proves nothing
	l.syncer.mu.Unlock()
	h.start(t)
	if err := h.ctx.Finish(); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("commit after a failed snapshot sync = %v, want ErrLogFailed", err)
	}
}

// A sync at a memtable rotation (SyncHooks) that failed is reported by the
// log's next sync, the rotated-away write-ahead file may hold what the log
// wrote (a group sync checks it). The snapshot's sync did not: with the
// snapshot in that file, the covered entries were deleted all the same.
func TestBadgerSnapshotSeesRotationSyncFailure(t *testing.T) {
	h := newSyncHeld(t)
	h.start(t)
	if err := h.ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	l := h.l
	l.mu.Lock()
	covered := l.seq - 1
	l.mu.Unlock()
	rotationErr := errors.New("sync at rotation: disk gone")
	l.hooks.err.Store(&rotationErr)
	if err := h.c.Snapshot(); !errors.Is(err, rotationErr) {
		t.Fatalf("snapshot after a failed sync at rotation = %v, want that failure", err)
	}
	if err := l.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(l.logKey(covered))
		return err
	}); err != nil {
		t.Fatalf("log entry %d after a snapshot whose sync failed: %v", covered, err)
	}
}
