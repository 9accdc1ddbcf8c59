package badgerq

import (
	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// TunedOptions returns Badger options for flowrun's one DB, tuned for queue
// traffic: append, read once, delete.
//
//   - Packed values up to 64 KiB stay in the LSM: eviction's deletes meet
//     them in compaction, which gives the space back without value-log GC
//     (whose discard statistics only move when the LSM compacts). Larger
//     chunks go to the value log, written once, so a transaction's size is
//     not bounded by Badger's batch limit (15% of a memtable).
//   - Small memtables (16 MiB, 3 of them) and small caches bound RSS: queue
//     data is read once, right after it was written, mostly from the
//     memtable or the OS page cache, so a big block cache buys nothing.
//   - 64 MiB value-log files, so value-log GC can hand back space in small
//     steps once entries are evicted.
//   - No compression: payloads are user data, often compressed already, and
//     CPU is the bottleneck at these rates.
//
// durable=true syncs every write (a commit survives power loss);
// durable=false leaves syncing to the OS (survives a process crash, not a
// machine crash) and is several times faster for small transactions.
func TunedOptions(dir string, durable bool) badger.Options {
	o := badger.DefaultOptions(dir).
		WithSyncWrites(durable).
		WithLogger(nil).
		WithValueThreshold(64 << 10).
		WithMemTableSize(16 << 20).
		WithNumMemtables(3).
		WithNumLevelZeroTables(3).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(8 << 20).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(16 << 20).
		WithValueLogFileSize(64 << 20).
		WithNumCompactors(2).
		WithCompression(options.None).
		WithDetectConflicts(false)
	return o
}

// OpenDB opens (creating if needed) a Badger DB with TunedOptions.
func OpenDB(dir string, durable bool) (*badger.DB, error) {
	return badger.Open(TunedOptions(dir, durable))
}
