package tx

import (
	"slices"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
)

// SyncAtRotation returns o with a hook that makes Badger's write-ahead log
// safe for deferred commits (CommitWithDeferred) on power loss. Open every
// durable DB that takes deferred commits with it: without it a BadgerLog
// commits deferred ones durably (as CommitWith).
//
// Why: Badger keeps its write-ahead log in one file per memtable and, with
// SyncWrites off, does not sync a file when it moves on to the next; on
// restart it replays each file on its own, up to its first damaged entry.
// Within one file a power loss therefore takes a suffix, but across two it
// could keep a commit in the newer file and lose an earlier one in the older
// file. A deferred commit is visible before its sync, so a later
// transaction may have read it: that one surviving without it is an update
// based on a lost one. The hook runs in Badger's write path at the moment
// it starts a new memtable, before the first write into it, and syncs every
// value-log and WAL file written so far (badgerSyncer, value logs first):
// nothing in the new file can reach the disk without everything before it.
// Badger already syncs a value-log file when it moves to the next one.
//
// It costs one sync per memtable (for TunedOptions, every 8 MiB written).
// The hook recognizes the rotation by the debug message Badger logs there
// (TestSyncAtRotation fails if a Badger upgrade changes it); o's own Logger
// still gets every message.
func SyncAtRotation(o badger.Options) badger.Options {
	o.Logger = &rotationBarrier{inner: o.Logger, syncer: newDirSyncer(badgerDirs(o))}
	return o
}

// barrierOf returns db's SyncAtRotation hook, or nil if it has none or one
// made for other directories (options changed after SyncAtRotation).
func barrierOf(db *badger.DB) *rotationBarrier {
	o := db.Opts()
	r, ok := o.Logger.(*rotationBarrier)
	if !ok || !slices.Equal(r.syncer.dirs, badgerDirs(o)) {
		return nil
	}
	return r
}

// badgerRotation is the format of the debug message Badger's write path logs
// when the current memtable is full, just before it makes the next one
// (badger v4 db.go, ensureRoomForWrite).
const badgerRotation = "Flushing memtable, mt.size=%d size of flushChan: %d\n"

// rotationBarrier is the badger.Logger SyncAtRotation installs.
type rotationBarrier struct {
	inner     badger.Logger
	syncer    *badgerSyncer
	rotations atomic.Int64 // syncs at rotation so far
	err       atomic.Pointer[error]
}

func (r *rotationBarrier) Debugf(format string, args ...any) {
	if format == badgerRotation {
		// A failed sync leaves the order unguarded: every later Durable
		// fails (and stops the coordinator), since the disk failed anyway.
		if err := r.syncer.sync(); err != nil {
			r.err.CompareAndSwap(nil, &err)
		}
		r.rotations.Add(1)
	}
	if r.inner != nil {
		r.inner.Debugf(format, args...)
	}
}

func (r *rotationBarrier) failure() error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *rotationBarrier) Errorf(format string, args ...any) {
	if r.inner != nil {
		r.inner.Errorf(format, args...)
	}
}

func (r *rotationBarrier) Warningf(format string, args ...any) {
	if r.inner != nil {
		r.inner.Warningf(format, args...)
	}
}

func (r *rotationBarrier) Infof(format string, args ...any) {
	if r.inner != nil {
		r.inner.Infof(format, args...)
	}
}
