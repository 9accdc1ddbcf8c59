package badgerq

import (
	"fmt"
	"maps"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/tx"
)

// Invalid-list pruning on the general path.
//
// A bound reported to the coordinator's Pruner says: no data of an invalid
// transaction with a pointer below it is stored in the queues, now or later.
// The coordinator then drops those pointers from its invalid list, and data
// still stored under one of them would count as committed. Eviction reports
// the smallest of:
//
//   - every group's cursor and every queue's first entry kept (evictQueue):
//     entries of invalid producers below a cursor are settled and deleted
//     by the same pass;
//   - every slot's hold (slot.hold): a consumer state version stored but not
//     committed (a consumer that persisted and died: the committed state in
//     memory may move past it, as an aborted empty step keeps its moves);
//   - the coordinator's VisibilityUpperBound: a transaction in progress may
//     persist later, and be invalidated after that (before, a queue without
//     groups held the bound at its oldest entry only, which a newer producer
//     could have written: an older producer persisting and dying then had its
//     pointer pruned at once, and its events became visible);
//   - every pointer whose Persist wrote data not yet committed or rolled
//     back (persisting).
//
// A Persist below a bound already reported is refused: its transaction timed
// out or was invalidated before it wrote (a zombie), consumers passed its
// pointer as settled, and what it wrote would have been visible to all.
//
// With Options.FastPath nothing is ever persisted before a commit and
// NoInvalidData is reported once at Open instead.

// pruneGated reports whether eviction reports prune bounds (general path).
func (b *Backend) pruneGated() bool { return b.pruner != nil && !b.opts.FastPath }

// beginPersist registers data about to be persisted under wp, or refuses it
// when wp is below a bound already reported. Registered with or without a
// pruner: eviction also keeps a registered pointer's expired entries (not
// in the depth yet, see inFlight).
func (b *Backend) beginPersist(wp uint64) error {
	b.pruneMu.Lock()
	defer b.pruneMu.Unlock()
	if b.pruneGated() && wp < b.pruneReported {
		return fmt.Errorf("badgerq: persist under write pointer %d, below the invalid-list prune bound %d already reported (timed out or invalidated): %w",
			wp, b.pruneReported, tx.ErrNotInProgress)
	}
	b.persisting[wp]++
	return nil
}

// endPersist: the data persisted under wp is committed or rolled back.
func (b *Backend) endPersist(wp uint64) {
	b.pruneMu.Lock()
	if n := b.persisting[wp]; n > 1 {
		b.persisting[wp] = n - 1
	} else {
		delete(b.persisting, wp)
	}
	b.pruneMu.Unlock()
}

// reportPrune reports min(low, VisibilityUpperBound, persisting) to the
// coordinator; low is what the queues' cursors, entries and holds allow.
func (b *Backend) reportPrune(low uint64) {
	bound := min(low, b.opts.Coordinator.VisibilityUpperBound())
	b.pruneMu.Lock()
	for wp := range b.persisting {
		bound = min(bound, wp)
	}
	// Set before reporting: a Persist from here on below it is refused.
	b.pruneReported = max(b.pruneReported, bound)
	b.pruneMu.Unlock()
	b.pruner.Report(bound)
}

// holdAt lowers the slot's hold to wp (see slot.hold). Under q.mu.
func (s *slot) holdAt(wp uint64) {
	if wp != 0 && (s.hold == 0 || wp < s.hold) {
		s.hold = wp
	}
}

// readInFlight opens a read of the store and returns it with the pointers
// registered by beginPersist at that moment (nil if none): entries the read
// finds of a pointer not among them are committed (a producer registers
// before it writes its entries, and deletes them, when it rolls back, before
// it ends its registration), and may be deleted and taken from the depth;
// the others are not in the depth yet, and an invalidated producer's
// Rollback, still to come, deletes them and drops its reservation. Taken
// apart, a Persist between the two (of a producer the groups passed as
// invalid) left its entries unregistered yet read, and deleted twice
// (TestEvictPersistBetweenReadsDepth). With a TTL, the clock reading comes
// first: an entry found expired was stamped, so registered, before it.
func (b *Backend) readInFlight() (*badger.Txn, map[uint64]int) {
	if evictReadTestHook != nil {
		evictReadTestHook()
	}
	b.pruneMu.Lock()
	defer b.pruneMu.Unlock()
	txn := b.db.NewTransaction(false)
	if len(b.persisting) == 0 {
		return txn, nil
	}
	return txn, maps.Clone(b.persisting)
}

// evictReadTestHook, if set, runs in readInFlight first (tests: to persist
// a producer there).
var evictReadTestHook func()
