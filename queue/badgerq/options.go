package badgerq

import (
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/skl"
	"github.com/flowrun/flowrun/internal/badgerutil"
	"github.com/flowrun/flowrun/tx"
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
//   - Small memtables (8 MiB, 3 of them) and no block or index cache bound
//     RSS: queue data is read once, right after it was written, mostly from
//     the memtable or the OS page cache, so a cache buys nothing. Without
//     caches Badger reads blocks and table indexes straight from the
//     memory-mapped tables (page cache, which the kernel can drop) instead of
//     copying them into the Go heap.
//   - Tables of half a memtable's arena (6 MiB) at every level. A table
//     builder holds its whole table in a z.Allocator of twice the table
//     size, and Badger keeps up to 8 of them in a pool that only shrinks
//     when idle; memtable flushes take theirs from the same pool. At this
//     size any pooled allocator holds a flush (an L0 table is smaller than
//     the memtable's arena) without growing, so the pool stays at 8 × 12 MiB.
//     With 2 MiB tables a flush grew a 4 MiB allocator to 12 MiB, with
//     4 MiB tables a flush of reclaim filler (512 B values) grew an 8 MiB
//     one to 24 MiB, and the pool crept up with the data written.
//   - 16 MiB value-log files, so value-log GC can hand back space in small
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
// durable adds tx.SyncHooks: while a log sync runs, Badger's writer waits
// before writing WAL entries (so no synced entry can point to an unsynced
// value), and it syncs once when Badger starts a new memtable (which
// deferred commits — tx.Context.FinishDeferred, the runtime's
// --defer-commits — need to be safe on power loss; without the hooks the
// BadgerLog commits them durably).
func TunedOptions(dir string, durable bool) badger.Options {
	return TunedOptionsLogged(dir, durable, nil)
}

// TunedOptionsLogged is TunedOptions with Badger's messages going to log
// (nil: nowhere).
func TunedOptionsLogged(dir string, durable bool, log badger.Logger) badger.Options {
	const memTable = 8 << 20
	o := badger.DefaultOptions(dir).
		WithSyncWrites(false).
		WithLogger(log).
		WithValueThreshold(1 << 10).
		WithMemTableSize(memTable).
		WithNumMemtables(3).
		WithNumLevelZeroTables(3).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(halfArena(memTable)).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithValueLogFileSize(16 << 20).
		WithNumCompactors(2).
		WithCompression(options.None).
		WithDetectConflicts(false).
		// Damaged files give an error naming the checksum instead of
		// garbage decoded (or a panic in a table's block iterator): values
		// and table blocks are checked as they are read (a CRC, hardware
		// assisted; the profiles do not show it).
		WithVerifyValueChecksum(true).
		WithChecksumVerificationMode(options.OnBlockRead)
	// Every level's tables are BaseTableSize (Badger doubles them per level
	// by default): a table builder holds its whole table in memory and
	// Badger pools up to 8 builders' buffers, so with doubling the memory
	// grew with the depth of the LSM, i.e. with the data ever written.
	o.TableSizeMultiplier = 1
	if durable {
		o = tx.SyncHooks(o)
	}
	return o
}

// MemoryBudget estimates the heap memory a DB opened with o holds at most,
// whatever the data written: memtable arenas (NumMemtables plus the one
// being flushed), the block and index caches, the table builders' pool (8
// allocators of twice the largest table, or of a memtable's arena if that is
// more: an L0 table is smaller than the arena it was built from) and the
// index buffers of the builders running at once (3 MiB each, one per
// compactor and one flush). For TunedOptions: 4 × 10.4 + 8 × 12 + 3 × 3 ≈
// 147 MiB. The runtime derives its default
// memory limit from it (specs/queues.md, "Memory").
//
// It holds for TableSizeMultiplier 1 (TunedOptions); with doubling tables it
// counts the deepest level Badger may build (MaxLevels).
func MemoryBudget(o badger.Options) int64 {
	arena := arenaBytes(o.MemTableSize)
	table := o.BaseTableSize
	for range max(o.MaxLevels-2, 0) {
		if o.TableSizeMultiplier <= 1 {
			break
		}
		table *= int64(o.TableSizeMultiplier)
	}
	builder := max(2*table, arena)
	const poolSize, indexBuf = 8, 3 << 20
	return int64(o.NumMemtables+1)*arena + o.BlockCacheSize + o.IndexCacheSize +
		poolSize*builder + int64(o.NumCompactors+1)*indexBuf
}

// OpenDB opens (creating if needed) a Badger DB with TunedOptions. For a
// durable store also pass tx.BadgerLogOptions{Sync: true} to the log and
// Options{Sync: true} to Open (see TunedOptions).
func OpenDB(dir string, durable bool) (*badger.DB, error) {
	return OpenDBLogged(dir, durable, nil)
}

// OpenDBLogged is OpenDB with Badger's messages going to log.
//
// Both first remove the empty value-log and memtable files a kill -9 can
// leave (a file created, not yet sized), which Badger v4 refuses to open
// ("Create a new file"; badger#2207) though they hold no data.
func OpenDBLogged(dir string, durable bool, log badger.Logger) (*badger.DB, error) {
	if err := badgerutil.RepairBeforeOpen(dir); err != nil {
		return nil, fmt.Errorf("badgerq: %s: %w", dir, err)
	}
	return badger.Open(TunedOptionsLogged(dir, durable, log))
}

// MaxWrite returns Badger's bounds on one atomic write of a DB opened with o
// (badger's db.go: maxBatchSize is 15% of the memtable, maxBatchCount that
// over the skiplist's largest node): at most bytes of keys and values under
// the value threshold (a larger value counts as a pointer), and fewer than
// entries entries. A larger write fails whole with badger.ErrTxnTooBig
// (tx.ErrTooLarge for a commit).
func MaxWrite(o badger.Options) (bytes, entries int64) {
	bytes = maxBatchBytes(o.MemTableSize)
	return bytes, bytes / int64(skl.MaxNodeSize)
}

// maxBatchBytes is Badger's maxBatchSize for a memtable of memTable bytes.
func maxBatchBytes(memTable int64) int64 { return 15 * memTable / 100 }

// arenaBytes is the size of the skiplist arena Badger allocates per memtable
// (badger.arenaSize): the memtable, plus room for its largest batch
// (MaxWrite) and that batch's nodes.
func arenaBytes(memTable int64) int64 {
	batch := maxBatchBytes(memTable)
	return memTable + batch + batch/int64(skl.MaxNodeSize)*int64(skl.MaxNodeSize)
}

// halfArena is half a memtable's arena, rounded up to a MiB: tables of this
// size get builder allocators (twice the table size) that any memtable flush
// fits in.
func halfArena(memTable int64) int64 {
	const mib = 1 << 20
	return (arenaBytes(memTable)/2 + mib - 1) / mib * mib
}
