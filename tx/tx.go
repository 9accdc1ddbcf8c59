package tx

import (
	"fmt"
	"slices"
)

// Kind tells a short transaction (bounded by a timeout, conflict-checked) from a long one.
type Kind uint8

const (
	// Short transactions carry a timeout and take part in conflict detection.
	Short Kind = iota + 1
	// Long transactions run batch work for a long time. Like short ones they are
	// conflict-checked, unlike Tephra's, and an abort of a long transaction
	// invalidates it, because its checkpoints may already have persisted data.
	Long
)

func (k Kind) String() string {
	switch k {
	case Short:
		return "short"
	case Long:
		return "long"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// snapshot is what a transaction sees: every version at or below readPointer
// except those in excluded (in progress when the snapshot was taken) or invalid.
// It is immutable and shared by every transaction started while it is current,
// so starting a transaction copies nothing that grows with the system's history.
type snapshot struct {
	readPointer uint64
	excluded    []uint64 // sorted: in-progress pointers <= readPointer
	invalid     *invalidList
}

// Tx is one transaction as its client sees it. A Tx is not safe for concurrent
// mutation; reading it (Visible and the accessors) from many goroutines is fine.
type Tx struct {
	// ID identifies the transaction and is its first write pointer.
	ID uint64
	// WritePointer is the version the transaction's writes carry. It equals ID
	// until a Checkpoint, then it is the newest checkpoint's pointer.
	WritePointer uint64
	// Kind is Short or Long.
	Kind Kind
	// Checkpoints lists the write pointers this transaction used before its
	// current one (ID first). Empty until the first Checkpoint.
	Checkpoints []uint64

	snap *snapshot
}

// ReadPointer is the highest version the transaction may see.
func (t *Tx) ReadPointer() uint64 { return t.snap.readPointer }

// Visible reports whether a version written with pointer v is visible to t:
// its own writes are, and so is every version committed before t started.
func (t *Tx) Visible(v uint64) bool {
	if v == t.WritePointer || v == t.ID {
		return true
	}
	if v > t.snap.readPointer {
		return t.ownCheckpoint(v)
	}
	if containsSorted(t.snap.excluded, v) {
		return t.ownCheckpoint(v)
	}
	return !t.snap.invalid.contains(v)
}

// VisibleExcludingCurrent is Visible without the transaction's current write
// pointer: what a long transaction reads to avoid seeing its own pending batch.
func (t *Tx) VisibleExcludingCurrent(v uint64) bool {
	return v != t.WritePointer && t.Visible(v)
}

// Owns reports whether v is one of t's own write pointers.
func (t *Tx) Owns(v uint64) bool {
	return v == t.ID || v == t.WritePointer || t.ownCheckpoint(v)
}

func (t *Tx) ownCheckpoint(v uint64) bool {
	for _, c := range t.Checkpoints {
		if c == v {
			return true
		}
	}
	return false
}

// InProgress returns the pointers at or below the read pointer that were in
// progress when t started (and so are invisible to it). The slice is shared:
// do not modify it.
func (t *Tx) InProgress() []uint64 { return t.snap.excluded }

// Invalid returns the invalid pointers known when t started, sorted. The slice
// is shared with other transactions: do not modify it.
func (t *Tx) Invalid() []uint64 { return t.snap.invalid.ids }

// FirstInProgress is the smallest pointer that was in progress when t started,
// or ReadPointer()+1 when none was: every version below it is settled
// (committed or invalid) for good, which is what eviction and compaction need.
func (t *Tx) FirstInProgress() uint64 {
	if len(t.snap.excluded) > 0 {
		return t.snap.excluded[0]
	}
	return t.snap.readPointer + 1
}

// AllWritePointers returns every pointer t has written with: checkpoints and the current one.
func (t *Tx) AllWritePointers() []uint64 {
	if len(t.Checkpoints) == 0 {
		return []uint64{t.WritePointer}
	}
	return append(slices.Clone(t.Checkpoints), t.WritePointer)
}

func (t *Tx) String() string {
	return fmt.Sprintf("tx %d (%s, wp %d, rp %d)", t.ID, t.Kind, t.WritePointer, t.snap.readPointer)
}

func containsSorted(s []uint64, v uint64) bool {
	_, ok := slices.BinarySearch(s, v)
	return ok
}
