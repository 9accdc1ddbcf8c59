package tx

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
)

// SyncHooks returns o with two hooks in Badger's write path that a durable
// BadgerLog needs to make a power loss take only a suffix of what was
// written, never an entry without what it points to or depends on. Open
// every durable DB with it (badgerq.TunedOptions(dir, true) does): without
// it a BadgerLog commits deferred commits (CommitWithDeferred) durably, and
// a power loss in the middle of a sync can leave write-ahead entries that
// point to lost values.
//
// The write-ahead gate. Badger writes a batch's large values to the value
// log, then its entries (keys and value pointers) to the write-ahead log
// (WAL) of the current memtable, and replays the WAL after a crash without
// checking that the values exist. A sync that ran while Badger kept writing
// could make a WAL entry durable whose value was written after the value
// log's sync had started: a power loss then leaves a key whose value is
// gone, and reading it fails. With the hook, a batch that reaches its WAL
// entries while a log sync runs waits for the sync to end (the sync holds
// the gate, syncing value logs first, then WALs): everything a WAL sync can
// write points to values the value-log sync covered. Badger keeps writing
// values meanwhile. The price: commits arriving during a sync reach the WAL
// after it instead of during it.
//
// The rotation barrier. Badger keeps its WAL in one file per memtable and,
// with SyncWrites off, does not sync a file when it moves on to the next;
// on restart it replays each file on its own, up to its first damaged
// entry. Within one file a power loss takes a suffix, but across two it
// could keep a commit in the newer file and lose an earlier one in the
// older: a deferred commit is visible before its sync, so the later one
// may have read it. The hook syncs every value-log and WAL file when
// Badger starts a new memtable, before anything is written to it (one sync
// per memtable: every 8 MiB for TunedOptions).
//
// What is left is the operating system's own writeback of dirty pages,
// seconds after a write, which no sync orders; the group syncs leave pages
// dirty for about a millisecond. The hooks recognize the two places by the
// debug messages Badger logs there (TestSyncHooks fails if a Badger upgrade
// changes them); o's own Logger still gets every message.
func SyncHooks(o badger.Options) badger.Options {
	o.Logger = &syncHooks{inner: o.Logger, syncer: newDirSyncer(badgerDirs(o))}
	return o
}

// Debug messages of badger v4's write path (db.go): writeRequests logs the
// first after writing a batch's values and before its WAL entries;
// ensureRoomForWrite the second when the memtable is full, just before it
// makes the next.
const (
	badgerWALPhase = "Writing to memtable"
	badgerRotation = "Flushing memtable, mt.size=%d size of flushChan: %d\n"
)

// syncHooks is the badger.Logger SyncHooks installs.
type syncHooks struct {
	inner  badger.Logger
	syncer *badgerSyncer // the rotation barrier's own
	// gate is held by every log sync (gatedSync); Badger's writer takes it
	// shared, for an instant, before a batch's WAL entries.
	gate      sync.RWMutex
	rotations atomic.Int64 // syncs at rotation so far
	err       atomic.Pointer[error]
}

// hooksOf returns db's SyncHooks, or nil if it has none or ones made for
// other directories (options changed after SyncHooks).
func hooksOf(db *badger.DB) *syncHooks {
	o := db.Opts()
	h, ok := o.Logger.(*syncHooks)
	if !ok || !slices.Equal(h.syncer.dirs, badgerDirs(o)) {
		return nil
	}
	return h
}

// gatedSync runs sync with the write-ahead gate closed (h may be nil).
func (h *syncHooks) gatedSync(sync func() error) error {
	if h == nil {
		return sync()
	}
	h.gate.Lock()
	defer h.gate.Unlock()
	return sync()
}

func (h *syncHooks) Debugf(format string, args ...any) {
	switch format {
	case badgerWALPhase:
		h.gate.RLock() // waits out a running log sync
		h.gate.RUnlock()
	case badgerRotation:
		// On Badger's writer: nothing is written during it. A failed sync
		// leaves the order unguarded: every later Durable fails (and stops
		// the coordinator), since the disk failed anyway.
		if err := h.syncer.syncAtRotation(); err != nil {
			h.err.CompareAndSwap(nil, &err)
		}
		h.rotations.Add(1)
	}
	if h.inner != nil {
		h.inner.Debugf(format, args...)
	}
}

func (h *syncHooks) failure() error {
	if p := h.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (h *syncHooks) Errorf(format string, args ...any) {
	if h.inner != nil {
		h.inner.Errorf(format, args...)
	}
}

func (h *syncHooks) Warningf(format string, args ...any) {
	if h.inner != nil {
		h.inner.Warningf(format, args...)
	}
}

func (h *syncHooks) Infof(format string, args ...any) {
	if h.inner != nil {
		h.inner.Infof(format, args...)
	}
}
