package tx

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the coordinator returns wraps one of them, so
// callers test with errors.Is; ConflictError carries details for errors.As.
var (
	// ErrConflict: another transaction committed an overlapping change after
	// this one started. Retry the whole transaction.
	ErrConflict = errors.New("tx: write conflict")
	// ErrNotInProgress: the transaction is unknown, already finished, timed
	// out or invalidated. Its writes must be rolled back.
	ErrNotInProgress = errors.New("tx: transaction not in progress")
	// ErrTooLarge: the change set exceeds the configured limits, or the staged
	// writes do not fit in one atomic write.
	ErrTooLarge = errors.New("tx: change set too large")
	// ErrBadWrite: the store refused a staged write (an empty or reserved
	// key, a key or value over its limits). Nothing was written; abort.
	// Retrying the same writes fails the same way.
	ErrBadWrite = errors.New("tx: staged write refused")
	// ErrInvalidTimeout: a timeout that is not positive or exceeds the maximum.
	ErrInvalidTimeout = errors.New("tx: invalid timeout")
	// ErrClosed: the coordinator (or a FileLog used directly) was closed.
	ErrClosed = errors.New("tx: coordinator closed")
	// ErrLogFailed: the edit log could not be written. The coordinator stops
	// accepting work, because it can no longer promise durability.
	ErrLogFailed = errors.New("tx: edit log failed")
	// ErrCorrupt: recovery found a snapshot or log it cannot read.
	ErrCorrupt = errors.New("tx: corrupt state")
	// ErrMisuse: a call the API does not allow — a Context started while
	// its transaction is open or with a nil participant, staged writes for a
	// log that cannot store them, Options out of bounds or a nil log, a
	// FileLog used before Recover or recovered twice. Nothing was started or
	// changed.
	ErrMisuse = errors.New("tx: misuse")
)

// ConflictError says which transaction conflicted. It matches ErrConflict.
type ConflictError struct {
	TxID uint64
	// Pending is true when the other writer had not finished committing yet.
	Pending bool
}

func (e *ConflictError) Error() string {
	if e.Pending {
		return fmt.Sprintf("tx: write conflict: tx %d overlaps a transaction that is committing", e.TxID)
	}
	return fmt.Sprintf("tx: write conflict: tx %d overlaps a transaction committed after it started", e.TxID)
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

func notInProgress(id uint64, why string) error {
	return fmt.Errorf("%w: tx %d %s", ErrNotInProgress, id, why)
}

// refusedWhole reports whether a log refused a batch before writing any of
// it (ErrTooLarge, ErrBadWrite): the log stays usable and the caller aborts,
// where any other append error leaves the outcome unknown.
func refusedWhole(err error) bool {
	return errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBadWrite)
}
