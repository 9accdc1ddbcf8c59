package tx

// This file is the implementer's side of durability, in the way
// database/sql/driver is to database/sql: a Log stores the coordinator's edits
// and snapshots. FileLog is the general one; BadgerLog is the single-store fast
// path; a nil Log keeps everything in memory (tests, throwaway runs).

// EditKind names one change of coordinator state.
type EditKind uint8

const (
	// EditReserve: write pointers below Pointer may be handed out. Written
	// before any pointer of a new block is used, so pointers never go back.
	EditReserve EditKind = iota + 1
	// EditStart: TxID started with TxKind, expiring at Expires (unix nanos).
	EditStart
	// EditCheckpoint: TxID took the new write pointer Pointer.
	EditCheckpoint
	// EditCommitting: TxID passed CanCommit with change Keys; participants may
	// persist from now on, so an unfinished one must be invalidated on recovery.
	EditCommitting
	// EditCommitted: TxID committed; Pointers are all its write pointers.
	EditCommitted
	// EditAborted: TxID aborted; its writes were rolled back.
	EditAborted
	// EditInvalid: TxID was invalidated; Pointers are all its write pointers.
	EditInvalid
	// EditPrune: invalid pointers below Pointer hold no data any more.
	EditPrune
)

// Edit is one entry of the edit log. Only the fields its Kind names are set.
type Edit struct {
	Kind     EditKind
	TxID     uint64
	TxKind   Kind
	Pointer  uint64
	Expires  int64
	Keys     []uint64 // change-key hashes
	Pointers []uint64
}

// Write is one key-value write staged by a participant for an atomic log.
type Write struct {
	Key, Value []byte
	Delete     bool
}

// Batch is what the coordinator hands its log at once.
type Batch struct {
	Edits []Edit
	// Writes are participant data that must land atomically with Edits.
	// Only a log whose Atomic method returns a store may receive them.
	Writes []Write
	// Wait asks Append to return only once the batch is durable (to the
	// log's sync mode). Without it the edits may ride with a later batch;
	// they are only hints for recovery (starts, aborts).
	Wait bool

	// patient: the caller holds nothing other transactions wait on, so a
	// gathering log may hold its sync back for them (BadgerLog's gathering);
	// appends made under the coordinator's lock are not. sibling: the writer
	// was counted as a sibling until it began this write, and the log counts
	// the write as in flight until it lands (siblingWatcher). closing:
	// Close's flush, whose sync is no group sync for commits (not counted
	// in Stats.LogSyncs).
	patient, sibling, closing bool
}

// State is the coordinator's recoverable state, as held in a snapshot.
type State struct {
	// NextPointer: every pointer below it may have been used.
	NextPointer uint64
	ReadPointer uint64
	InProgress  []InProgressTx
	// Invalid lists invalid pointers, sorted.
	Invalid []uint64
	// Committed change keys, as (key, commit sequence) pairs. No longer
	// written: a recovered transaction that had not reached CanCommit
	// conflicts on any key (see restore), so recovery needs no committed keys.
	// Kept so that older snapshots still decode.
	Committed []CommittedKey
}

// InProgressTx is one in-progress transaction in a State.
type InProgressTx struct {
	ID         uint64
	Kind       Kind
	Expires    int64
	Pointers   []uint64 // checkpoint pointers after ID
	Committing bool
	// Refused: committing, but its Commit is refused until a CanCommit
	// passes (it could not hold its keys again; see Coordinator.Commit).
	Refused bool
	Keys    []uint64
}

// CommittedKey is a change key and the pointer at which it last committed.
type CommittedKey struct {
	Key, Pointer uint64
}

// Log persists coordinator edits. The coordinator calls Recover once at Open,
// then Append from many goroutines at once (a log should group their syncs),
// and Snapshot from one goroutine at a time.
type Log interface {
	// Recover returns the latest snapshot (nil if none) and the edits logged
	// after it, in order. A torn or corrupt tail is cut off, not an error.
	Recover() (*State, []Edit, error)
	// Append writes a batch. With b.Wait it returns after the batch is
	// durable; an error means the outcome is unknown and the coordinator stops.
	Append(b *Batch) error
	// Snapshot is called while no Append is in flight, with s reflecting
	// every edit appended so far. It must note that position quickly (e.g.
	// roll to a new log file) and return a function, run later without
	// blocking appends, that stores s and drops the edits it covers.
	Snapshot(s *State) (write func() error, err error)
	Close() error
}

// DeferredLog is a Log that can write a waited batch without waiting for it to
// become durable, and report durability separately. The coordinator uses it
// for CommitWithDeferred: a commit becomes visible to later transactions once
// its record is written (it survives a killed process then), while the caller
// waits for the sync before telling anyone outside. That is safe because the
// log is ordered: a transaction that saw the commit writes its own record
// after it, and a sync that covers a record covers every record before it.
type DeferredLog interface {
	Log
	// AppendDeferred writes b as Append does with b.Wait, but returns once
	// the batch is written, with a ticket for Durable. An error means the
	// outcome is unknown, as for Append.
	AppendDeferred(b *Batch) (ticket uint64, err error)
	// Durable returns once the batch of ticket is durable.
	Durable(ticket uint64) error
}

// AtomicLog is a Log that can write participant data in the same atomic write
// as the commit record: the single-store fast path. Store identifies the
// underlying store (a *badger.DB); a participant whose Store is the same may
// stage its writes instead of persisting them itself.
type AtomicLog interface {
	Log
	Store() any
}
