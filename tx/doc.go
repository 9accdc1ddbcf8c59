// Package tx is flowrun's transaction coordinator: snapshot isolation over
// versioned data, with optimistic write-write conflict detection and a
// two-phase commit driver for the participants (queues, state tables, sinks)
// whose writes make up one step of a flowlet.
//
// # The model
//
// Every transaction gets a write pointer, the version its writes carry, and a
// read snapshot: a read pointer plus the pointers that were in progress or
// invalid when it started. A version v is visible to tx when tx.Visible(v):
// v is tx's own, or v <= read pointer and v was neither in progress nor
// invalid. The snapshot is immutable and shared by every transaction started
// while it is current; unlike Tephra, starting a transaction copies nothing
// that grows with the invalid list.
//
// A transaction commits when no other transaction that committed after it
// started changed one of the same keys (first committer wins). Change keys are
// tracked as 64-bit hashes in an index keyed by hash, so a conflict check costs
// O(keys), not O(recent commits). The index comes in generations of a few
// thousand keys: a young transaction probes only the newest, which stays in
// the CPU cache, while one that has been running for long checks every
// generation since it started.
//
// # The loop
//
// A participant implements Participant; a Context drives them:
//
//	coord, _ := tx.Open(tx.Options{Log: log})
//	ctx := coord.NewContext(queue, table)
//	for {
//		t, err := ctx.Start(5 * time.Second)
//		// ... read with t.Visible, buffer writes in the participants ...
//		err = ctx.Finish() // CanCommit → Persist → Commit → PostCommit
//		if errors.Is(err, tx.ErrConflict) {
//			continue // rolled back and aborted already; retry
//		}
//	}
//
// When every participant is a Stager writing into the same store as an
// AtomicLog (BadgerLog over one *badger.DB), Finish takes the single-store fast
// path: the staged writes and the commit record land in one atomic write,
// there is no separate persist phase, and a crash can never leave persisted
// but uncommitted data.
//
// A driver that pipelines calls FinishDeferred instead: on the fast path with
// a syncing BadgerLog it returns once the commit is written and visible to
// the next transactions, and the returned Pending's Wait returns once it is
// durable. Later commits share the sync; call Wait before telling anything
// outside the log that the transaction committed. A power loss undoes a
// suffix of the deferred commits, never one that a surviving commit read,
// as long as the DB was opened with SyncHooks (without them the
// BadgerLog commits deferred ones durably; specs/transactions.md §2).
// Finish never shows a commit before it is durable.
//
//	p, err := ctx.FinishDeferred() // visible now
//	// ... next transactions ...
//	err = p.Wait() // durable now (and so is every commit before it)
//
// # Durability
//
// With a Log the coordinator's state survives kill -9: FileLog appends edits
// with group commit (concurrent commits share one fsync), snapshots the state
// periodically and drops the log it covers; Open recovers from the latest
// snapshot plus the edits after it. Write pointers are reserved in durable
// blocks, so they never go backwards after a restart. A nil Log keeps
// everything in memory.
//
// A BadgerLog with Sync groups commits too, and it gathers: a sync's leader
// that sees a few short transactions in progress that have not written yet
// waits for them (at most about one sync) so that they share its sync —
// a producer and its consumer taking turns would otherwise cost a sync each.
// Stats.LogSyncs and LogGathers show how commits shared syncs.
//
// # Bookkeeping stays bounded
//
// Expired transactions are invalidated by a background sweeper. The invalid
// list shrinks whenever every registered Pruner reports that no data of
// invalid transactions below some pointer remains; committed change keys are
// dropped once no in-progress transaction can conflict with them.
//
// specs/transactions.md states the protocol, the guarantees and the measured
// figures.
package tx
