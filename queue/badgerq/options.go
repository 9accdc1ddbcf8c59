package badgerq

import (
	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// TunedOptions returns Badger options for flowrun's one DB, tuned for queue
// traffic: append, read once, delete.
//
//   - Packed values above 1 KiB go to the value log (written once, read
//     once through mmap); the LSM keeps keys, cursor states, the transaction
//     log and tiny values. Keeping packed values of up to 64 KiB in the LSM
//     (the first design) made a growing backlog flow down the LSM levels:
//     compaction rewrote every value several times (a backlog of 100 B events
//     filled at 16–23 MB/s instead of 175 MB/s) and Badger's table builders,
//     sized from the table size and kept in an 8-deep pool, held 1–2 GiB of
//     anonymous memory. The price is that space comes back only through
//     value-log GC, which reclaim.go drives (memtable flush, compaction, GC).
//   - Small memtables (16 MiB, 3 of them) and small caches bound RSS: queue
//     data is read once, right after it was written, mostly from the
//     memtable or the OS page cache, so a big block cache buys nothing.
//   - 64 MiB value-log files, so value-log GC can hand back space in small
//     steps once entries are evicted.
//   - No compression: payloads are user data, often compressed already, and
//     CPU is the bottleneck at these rates.
//
// SyncWrites is off whatever durable says: durability comes from the
// transaction log, not from Badger. Open the coordinator's log with
//
//	tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: durable})
//
// With Sync, every waited commit returns only after a DB.Sync that started
// after its write, and concurrent commits share one sync (group commit), so
// a commit survives power loss. Badger's own SyncWrites would sync its
// write-ahead log once per Badger transaction, which serializes concurrent
// commits on fsync (that made durable runs 4–30× slower). Writes outside a
// transaction (queue metadata, general-path Persist) are synced by the
// backend when Options.Sync is set. Without sync a commit survives a process
// crash (the OS has the pages), not a machine crash.
//
// durable is kept for compatibility and for future tuning; today it changes
// nothing in the returned options.
func TunedOptions(dir string, durable bool) badger.Options {
	_ = durable
	o := badger.DefaultOptions(dir).
		WithSyncWrites(false).
		WithLogger(nil).
		WithValueThreshold(1 << 10).
		WithMemTableSize(8 << 20).
		WithNumMemtables(3).
		WithNumLevelZeroTables(3).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(2 << 20).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(8 << 20).
		WithValueLogFileSize(16 << 20).
		WithNumCompactors(2).
		WithCompression(options.None).
		WithDetectConflicts(false)
	// Every level's tables are BaseTableSize (Badger doubles them per level
	// by default): a table builder holds its whole table in memory and
	// Badger pools up to 8 builders' buffers, so with doubling the memory
	// grew with the depth of the LSM, i.e. with the data ever written.
	o.TableSizeMultiplier = 1
	return o
}

// OpenDB opens (creating if needed) a Badger DB with TunedOptions. For a
// durable store also pass tx.BadgerLogOptions{Sync: true} to the log and
// Options{Sync: true} to Open (see TunedOptions).
func OpenDB(dir string, durable bool) (*badger.DB, error) {
	return badger.Open(TunedOptions(dir, durable))
}
