package badgerq

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Space reclamation. Packed values above the value threshold (1 KiB, see
// TunedOptions) live in Badger's value log; the LSM holds their keys. The
// space of an evicted entry comes back in three steps, none of which Badger
// takes by itself in a useful time for a queue:
//
//  1. The eviction tombstones and the keys they delete must leave the
//     memtable. A memtable flushes only when full, and queue metadata is a
//     few hundred bytes per transaction, so one 16 MiB memtable can cover
//     gigabytes of value log. reclaim fills the memtable with short-lived
//     filler keys ("qf…", deleted again at once) so that it flushes now.
//  2. A compaction must drop the deleted keys: that is what records, per
//     value-log file, how many bytes are garbage. Flatten compacts the LSM
//     (small: keys and metadata only) into one level.
//  3. Value-log GC rewrites the live rest of every file that is mostly
//     garbage and deletes it; in a queue consumed in order, old files are
//     entirely garbage and are just deleted.
//
// The background loop runs a reclaim whenever ReclaimBytes of payload were
// evicted, truncated or deleted since the last one; Maintain runs one now.

const fillerTag = "qf"

// reclaimDue reports whether enough was freed since the last reclaim.
func (b *Backend) reclaimDue() bool {
	return b.opts.ReclaimBytes > 0 && b.freed.Load()-b.reclaimedAt.Load() >= b.opts.ReclaimBytes
}

// reclaimOverdue: so much was freed that a reclaim runs even while
// producers write (the disk would grow without bound otherwise).
const overdueFactor = 4

// reclaimNow decides, on an eviction tick, between a full reclaim and
// leaving it for later. A full reclaim writes a memtable or two of filler and
// compacts the LSM: while producers write, that competes with them for
// Badger's write goroutine and the CPU (p99 tails of 50–580 ms at 150 MB/s on
// 2 cores). So under load the tick runs value-log GC only — it frees what
// Badger's own compactions already marked as garbage, which under a short
// burst is often nothing — and the full reclaim waits for a quiet tick (no
// producer commit since the last one) or for overdueFactor × ReclaimBytes
// freed: the disk may hold that much consumed data more while producers
// write (specs/queues.md, Semantics).
func (b *Backend) reclaimNow(quiet bool) error {
	if !b.reclaimDue() {
		return nil
	}
	if quiet || b.freed.Load()-b.reclaimedAt.Load() >= overdueFactor*b.opts.ReclaimBytes {
		collected, err := b.reclaim()
		if err == nil && collected == 0 {
			// Badger's discard statistics or read watermark may have
			// lagged the compaction: the next GC ticks try again.
			b.followUps.Store(3)
		}
		return err
	}
	_, err := b.gc()
	return err
}

// reclaim gives the space of deleted entries back to the file system and
// says how many value-log files its GC rewrote.
func (b *Backend) reclaim() (int, error) {
	b.reclaimMu.Lock()
	defer b.reclaimMu.Unlock()
	if h := reclaimTestHook.Load(); h != nil {
		(*h)()
	}
	mark := b.freed.Load()
	if err := b.flushMemtables(); err != nil {
		return 0, err
	}
	if err := b.db.Flatten(1); err != nil {
		return 0, err
	}
	collected, err := b.gc()
	if err != nil {
		return collected, err
	}
	b.reclaimedAt.Store(mark)
	return collected, nil
}

// flushMemtables writes filler (deleted again at the end) until the
// memtables holding writes made before the call are flushed into at least two
// L0 tables and Flatten has a compaction to run (below). It gives up after
// flushWait or NumLevelZeroTables + 2 memtables of filler: the next reclaim
// picks up what this one missed.
func (b *Backend) flushMemtables() error {
	memtable := b.db.Opts().MemTableSize
	const fillerValue = 512 // below the value threshold: stays in the memtable
	val := make([]byte, fillerValue)
	key := func(i int) []byte { return binary.BigEndian.AppendUint32([]byte(fillerTag), uint32(i)) }
	before := map[uint64]bool{}
	for _, t := range b.db.Tables() {
		before[t.ID] = true
	}
	// Two new L0 tables: memtables flush in order, so the memtable that was
	// current at the call has been flushed unless two were already waiting
	// (rare: flushing is fast). (DB.MaxVersion would say exactly which write
	// reached a table, but it reads the memtable without a lock.) And
	// Flatten must have something to do: it compacts across levels, and
	// within a lone L0 only once L0 holds more than NumLevelZeroTables
	// tables. A young DB has every table in L0: with two or three there,
	// Flatten did nothing, no discard statistics were recorded, value-log GC
	// never found a file to collect and the space never came back (the
	// conformance suite's eviction test failed so about 1 run in 8 on a
	// loaded machine).
	l0Max := b.db.Opts().NumLevelZeroTables
	flushed := func() bool {
		n, l0, deeper := 0, 0, false
		for _, t := range b.db.Tables() {
			switch {
			case t.Level > 0:
				deeper = true
			case !before[t.ID]:
				n++
				l0++
			default:
				l0++
			}
		}
		return n >= 2 && (deeper || l0 > l0Max)
	}
	written := 0
	deadline := time.Now().Add(flushWait)
	// Each batch of filler is deleted right after it is written, so a
	// flushed table holds the filler with its tombstones and the compaction
	// into the last level drops both: the filler leaves nothing on disk.
	batch := func(from int, write func(*badger.WriteBatch, []byte) error) error {
		wb := b.db.NewWriteBatch()
		for i := from; i < from+256; i++ {
			if err := write(wb, key(i)); err != nil {
				wb.Cancel()
				return err
			}
		}
		return wb.Flush()
	}
	for !flushed() && time.Now().Before(deadline) && int64(written*fillerValue) < int64(l0Max+2)*memtable {
		if err := batch(written, func(wb *badger.WriteBatch, k []byte) error { return wb.Set(k, val) }); err != nil {
			return err
		}
		if err := batch(written, func(wb *badger.WriteBatch, k []byte) error { return wb.Delete(k) }); err != nil {
			return err
		}
		written += 256
		select {
		case <-b.stop:
			return errors.New("badgerq: closing")
		default:
		}
	}
	return nil
}

const flushWait = 10 * time.Second

// reclaimTestHook, if set, runs at the start of every reclaim (tests: to
// hold one). Atomic: the background loop reads it.
var reclaimTestHook atomic.Pointer[func()]

// gc runs value-log GC until it finds nothing to rewrite. Badger rewrites
// a file's live values into the current value log and then deletes the
// file, without a sync in between (SyncWrites off): the delete could reach
// the disk before the rewritten values, and a power loss would lose them.
// With Sync, an iterator held open across the GC keeps Badger from deleting
// rewritten files (it defers them until the last iterator closes) until
// they are synced.
//
// It returns how many files it rewrote.
func (b *Backend) gc() (collected int, err error) {
	if b.opts.Sync && !b.db.Opts().InMemory {
		txn := b.db.NewTransaction(false)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("\x00gc-hold/")})
		defer func() {
			if serr := b.sync(); err == nil {
				err = serr
			}
			it.Close() // the rewritten files are deleted now, if nothing else iterates
			txn.Discard()
		}()
	}
	for {
		err := b.db.RunValueLogGC(b.opts.GCDiscardRatio)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return collected, nil
		}
		if err != nil {
			return collected, err
		}
		collected++
	}
}
