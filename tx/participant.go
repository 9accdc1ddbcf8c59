package tx

import (
	"errors"
	"fmt"
	"time"
)

// Participant is anything whose writes commit or abort with a transaction:
// queues, state tables, sinks. Context drives it through two-phase commit:
//
//	StartTx → (work) → ChangeKeys → [CanCommit] → Persist → [Commit] → PostCommit
//	                                  any failure → Rollback → [Abort or Invalidate]
type Participant interface {
	// StartTx hands the participant its transaction; it buffers writes from here.
	StartTx(tx *Tx) error
	// UpdateTx hands it the transaction after a Checkpoint (new write pointer).
	UpdateTx(tx *Tx) error
	// ChangeKeys are the keys it changed, for conflict detection. Keys must be
	// unique across participants (prefix them with a table name).
	ChangeKeys() [][]byte
	// Persist makes its buffered writes durable, tagged with the write pointer.
	// It is called only after CanCommit succeeded.
	Persist() error
	// PostCommit runs after the commit is visible to later transactions
	// (with Context.Finish, once it is durable; with FinishDeferred, perhaps
	// before). It cannot change the outcome; with FinishDeferred it must not
	// tell anything outside the coordinator's log about the commit.
	PostCommit()
	// Rollback undoes everything persisted and drops what is buffered. An error
	// means data may remain: the transaction is then invalidated.
	Rollback() error
}

// Stager is a participant that can hand its writes to the coordinator's
// AtomicLog instead of persisting them: the single-store fast path. When every
// participant of a Context is a Stager on the log's store, their writes and the
// commit record land in one atomic write, so a crash can never leave persisted
// but uncommitted data, and no transaction needs to be invalidated for it.
type Stager interface {
	Participant
	// Store identifies the store it writes to (for Badger, the *badger.DB).
	Store() any
	// Stage appends the buffered writes to dst. Versions must already be
	// encoded with the transaction's write pointer.
	Stage(dst []Write) ([]Write, error)
}

// Context runs one transaction over a set of participants in the right order,
// like Tephra's TransactionContext. A Context is reusable: Start again after
// Finish or Abort (Start while a transaction is open is refused with
// ErrMisuse). It is not safe for concurrent use.
//
// A participant that panics does not leave the transaction open: the Context
// rolls every participant back and aborts it (invalidates it if a rollback
// failed or panicked too), then panics again with the first value.
type Context struct {
	c      *Coordinator
	parts  []Participant
	tx     *Tx
	writes []Write
	keys   [][]byte
}

// NewContext returns a Context over the given participants.
func (c *Coordinator) NewContext(parts ...Participant) *Context {
	return &Context{c: c, parts: parts}
}

// Add adds a participant; only between transactions.
func (x *Context) Add(p Participant) { x.parts = append(x.parts, p) }

// Tx returns the current transaction, nil between transactions.
func (x *Context) Tx() *Tx { return x.tx }

// Start begins a short transaction and hands it to every participant.
func (x *Context) Start(timeout time.Duration) (*Tx, error) {
	if err := x.canStart(); err != nil {
		return nil, err
	}
	tx, err := x.c.StartShort(timeout)
	if err != nil {
		return nil, err
	}
	return x.begin(tx)
}

// StartLong begins a long transaction.
func (x *Context) StartLong() (*Tx, error) {
	if err := x.canStart(); err != nil {
		return nil, err
	}
	tx, err := x.c.StartLong()
	if err != nil {
		return nil, err
	}
	return x.begin(tx)
}

// canStart refuses a start that would abandon the open transaction (it
// would stay in progress, holding its keys, until it timed out: a day for a
// long one) or hand a transaction to a nil participant.
func (x *Context) canStart() error {
	if x.tx != nil {
		return fmt.Errorf("%w: Start while tx %d is open (Finish or Abort it first)", ErrMisuse, x.tx.ID)
	}
	for i, p := range x.parts {
		if p == nil {
			return fmt.Errorf("%w: participant %d is nil", ErrMisuse, i)
		}
	}
	return nil
}

func (x *Context) begin(tx *Tx) (*Tx, error) {
	x.tx = tx
	defer x.abortOnPanic()
	for _, p := range x.parts {
		if err := p.StartTx(tx); err != nil {
			return nil, x.Abort(fmt.Errorf("tx: participant start: %w", err))
		}
	}
	return tx, nil
}

// Checkpoint moves the transaction to a new write pointer and tells every
// participant. On any failure, as with Finish, every participant is rolled
// back and the transaction ended: no error leaves it open.
func (x *Context) Checkpoint() error {
	if x.tx == nil {
		return notInProgress(0, "has not started")
	}
	next, err := x.c.Checkpoint(x.tx)
	if err != nil {
		return x.Abort(err)
	}
	x.tx = next
	defer x.abortOnPanic()
	for _, p := range x.parts {
		if err := p.UpdateTx(next); err != nil {
			return x.Abort(fmt.Errorf("tx: participant checkpoint: %w", err))
		}
	}
	return nil
}

// Finish commits: check conflicts, persist every participant, commit, then
// post-commit. On any failure every participant is rolled back and the
// transaction aborted (or invalidated when a rollback failed); the returned
// error wraps the cause (ErrConflict, ErrNotInProgress, ...).
func (x *Context) Finish() error {
	_, err := x.finish(false)
	return err
}

// FinishDeferred is Finish for a driver that pipelines its transactions. On
// the single-store fast path with a DeferredLog it returns once the commit
// is written and visible to later transactions, with PostCommit done, before
// the log's sync: the driver may start its next transaction at once and
// calls Pending.Wait before it tells anyone outside that this one committed
// (see Coordinator.CommitWithDeferred). Otherwise it is Finish.
func (x *Context) FinishDeferred() (Pending, error) {
	return x.finish(true)
}

func (x *Context) finish(deferred bool) (Pending, error) {
	tx := x.tx
	if tx == nil {
		return Pending{}, notInProgress(0, "has not started")
	}
	defer x.abortOnPanic()
	x.keys = x.keys[:0]
	for _, p := range x.parts {
		x.keys = append(x.keys, p.ChangeKeys()...)
	}
	var err error
	var pending Pending
	if x.fastPath() {
		x.writes = x.writes[:0]
		for _, p := range x.parts {
			if x.writes, err = p.(Stager).Stage(x.writes); err != nil {
				return Pending{}, x.Abort(fmt.Errorf("tx: stage: %w", err))
			}
		}
		if deferred {
			pending, err = x.c.CommitWithDeferred(tx, x.keys, x.writes)
		} else {
			err = x.c.CommitWith(tx, x.keys, x.writes)
		}
		clear(x.writes) // drop references to the payloads
	} else {
		if err = x.c.CanCommit(tx, x.keys); err != nil {
			return Pending{}, x.Abort(err)
		}
		for _, p := range x.parts {
			if err = p.Persist(); err != nil {
				return Pending{}, x.Abort(fmt.Errorf("tx: persist: %w", err))
			}
		}
		err = x.c.Commit(tx)
	}
	if err != nil {
		if errors.Is(err, ErrLogFailed) {
			// The commit may or may not be durable: nothing is safe to undo.
			x.tx = nil
			return Pending{}, err
		}
		return Pending{}, x.Abort(err)
	}
	x.tx = nil
	// The commit is visible (with Finish, durable too): participants may
	// publish in memory what it changed.
	for _, p := range x.parts {
		p.PostCommit()
	}
	return pending, nil
}

// fastPath reports whether every participant can stage into the log's store.
func (x *Context) fastPath() bool {
	al, ok := x.c.log.(AtomicLog)
	if !ok {
		return false
	}
	store := al.Store()
	for _, p := range x.parts {
		s, ok := p.(Stager)
		if !ok || s.Store() != store {
			return false
		}
	}
	return true
}

// Abort rolls back every participant, then aborts the transaction, or
// invalidates it when a rollback failed. It returns cause joined with any
// rollback error; with a nil cause, only those. A rollback that panics
// counts as failed; Abort panics again with its value once the transaction
// has ended.
func (x *Context) Abort(cause error) error {
	rec, err := x.abort(cause)
	if rec != nil {
		panic(rec.v)
	}
	return err
}

// recovered is a participant's panic, to raise again once the transaction ended.
type recovered struct{ v any }

func (x *Context) abort(cause error) (*recovered, error) {
	tx := x.tx
	if tx == nil {
		return nil, cause
	}
	x.tx = nil
	var rollbackErrs []error
	var rec *recovered
	for _, p := range x.parts {
		if r, err := rollback(p); r != nil {
			if rec == nil {
				rec = r
			}
			rollbackErrs = append(rollbackErrs, fmt.Errorf("tx: rollback panicked: %v", r.v))
		} else if err != nil {
			rollbackErrs = append(rollbackErrs, fmt.Errorf("tx: rollback: %w", err))
		}
	}
	var endErr error
	if len(rollbackErrs) > 0 {
		endErr = x.c.Invalidate(tx)
	} else {
		endErr = x.c.Abort(tx)
	}
	if errors.Is(endErr, ErrNotInProgress) {
		endErr = nil // already timed out or invalidated: nothing left to end
	}
	return rec, errors.Join(append([]error{cause, endErr}, rollbackErrs...)...)
}

// rollback calls p.Rollback, catching a panic.
func rollback(p Participant) (rec *recovered, err error) {
	defer func() {
		if r := recover(); r != nil {
			rec = &recovered{r}
		}
	}()
	return nil, p.Rollback()
}

// abortOnPanic, deferred while participants run, ends the open transaction
// when one of them panics (Abort), then panics again with the same value.
func (x *Context) abortOnPanic() {
	r := recover()
	if r == nil {
		return
	}
	x.abort(fmt.Errorf("tx: participant panicked: %v", r))
	panic(r)
}
