package tx

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Options configure a Coordinator. The zero value is usable: an in-memory
// coordinator with the defaults below.
type Options struct {
	// Log persists the coordinator's state. Nil keeps it in memory only.
	Log Log
	// MaxTimeout bounds the timeout of short transactions. Default 1h.
	MaxTimeout time.Duration
	// LongTimeout is the lifetime of long transactions. Default 24h.
	LongTimeout time.Duration
	// MaxChangeKeys bounds the change keys of one transaction. Default 1<<20.
	MaxChangeKeys int
	// MaxChangeBytes bounds the total size of one transaction's change keys.
	// Default 64 MiB.
	MaxChangeBytes int
	// ExpiryInterval is how often expired transactions are invalidated in
	// the background. Default 100ms; negative disables the sweeper (tests
	// call ExpireTimedOut themselves). Expiry is also checked on every
	// CanCommit, Commit and Checkpoint, so a late commit never succeeds.
	ExpiryInterval time.Duration
	// SnapshotEvery is the number of logged batches between snapshots of the
	// state, after which older log entries are dropped. Default 100000.
	SnapshotEvery int
	// ReserveBlock is how many write pointers one durable reservation covers.
	// Default 1<<20, at most MaxReserveBlock (a pointer plus a block must not
	// wrap around: pointers never go back).
	ReserveBlock uint64
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// EndRecoveredTransactions invalidates every transaction recovered as in
	// progress, at Open. Right for an embedded coordinator, whose clients
	// died with it: their transactions can never finish, and a recovered
	// committing one would otherwise hold its change keys until it expires.
	// Leave it off when clients outlive the coordinator (remote participants).
	EndRecoveredTransactions bool

	realClock bool // set by withDefaults when Now is time.Now
}

// MaxReserveBlock bounds Options.ReserveBlock.
const MaxReserveBlock = 1 << 40

func (o *Options) withDefaults() {
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = time.Hour
	}
	if o.LongTimeout <= 0 {
		o.LongTimeout = 24 * time.Hour
	}
	if o.MaxChangeKeys <= 0 {
		o.MaxChangeKeys = 1 << 20
	}
	if o.MaxChangeBytes <= 0 {
		o.MaxChangeBytes = 64 << 20
	}
	if o.ExpiryInterval == 0 {
		o.ExpiryInterval = 100 * time.Millisecond
	}
	if o.SnapshotEvery <= 0 {
		o.SnapshotEvery = 100000
	}
	if o.ReserveBlock == 0 {
		o.ReserveBlock = 1 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
		o.realClock = true
	}
}

// txState is the coordinator's record of one in-progress transaction.
type txState struct {
	id       uint64
	kind     Kind
	expires  int64    // unix nanos
	pointers []uint64 // checkpoint pointers after id
	startSeq uint64   // commit sequence when it started: conflicts are commits after it
	keys     []uint64 // change keys held as pending since CanCommit
	// dropping: keys an earlier CanCommit held that a later one (or a
	// one-step commit) no longer names, still held until its record is
	// durable: until then the earlier COMMITTING, naming them, is the one
	// recovery trusts, and its participants may have persisted them.
	dropping []uint64
	// committing: passed CanCommit, so participants may have persisted data.
	committing bool
	// refused: its last CanCommit was refused (a conflict); Commit refuses
	// too rather than commit without the conflict check.
	refused bool
	// finalizing: its commit record is being written; it cannot expire now.
	finalizing bool
	// logged: its START edit is in the log. A short transaction's START
	// waits for the first edit recovery needs (CanCommit's COMMITTING or a
	// checkpoint): until then it has persisted nothing, so a crash may
	// forget it, and most transactions save a log write (see restore).
	logged bool
	// sibling: counted in Coordinator.siblings (a short transaction that
	// may still append its commit; see siblingWatcher).
	sibling bool
	// recovered: in progress when the coordinator last stopped. What
	// committed since it started is not known, so any change key it tries to
	// commit conflicts, except those it held (passed CanCommit) before.
	recovered bool
}

func startEdit(st *txState) Edit {
	return Edit{Kind: EditStart, TxID: st.id, TxKind: st.kind, Expires: st.expires}
}

// committedEdit is the COMMITTED edit of st. It carries no change keys:
// recovery does not need the keys of finished transactions (see restore).
func (c *Coordinator) committedEdit(st *txState) Edit {
	return Edit{Kind: EditCommitted, TxID: st.id, Pointers: st.loggedPointers()}
}

// loggedPointers is what an edit records of the pointers: nothing when the
// id is the only one (replay then uses TxID), saving an allocation per commit.
func (s *txState) loggedPointers() []uint64 {
	if len(s.pointers) == 0 {
		return nil
	}
	return s.allPointers()
}

func (s *txState) allPointers() []uint64 {
	return append([]uint64{s.id}, s.pointers...)
}

func (s *txState) maxPointer() uint64 {
	if n := len(s.pointers); n > 0 {
		return s.pointers[n-1]
	}
	return s.id
}

// Coordinator hands out transactions, detects conflicts and records outcomes.
// It is safe for concurrent use.
type Coordinator struct {
	opts Options
	log  Log

	// gate is held shared by every commit from its log write to its
	// finalization, and exclusively while a snapshot is captured, so that a
	// snapshot always reflects every edit logged before it.
	gate   sync.RWMutex
	snapMu sync.Mutex // one snapshot at a time

	mu          sync.Mutex
	closed      bool
	failed      error
	nextPointer uint64
	reserved    uint64 // pointers below it are durably reserved
	readPointer uint64
	inProgress  map[uint64]*txState
	ordered     []uint64     // sorted in-progress pointers, checkpoints included
	orderedHint atomic.Int64 // len(ordered) at the last snapshot: sizes the next one outside mu
	// deferredCommits counts commits returned before they were durable.
	deferredCommits atomic.Uint64
	invalid         *invalidList
	snap            *snapshot
	dirty           bool // snap is stale
	conflicts       conflictIndex
	pruners         []*Pruner
	sinceSnap       atomic.Int64 // logged batches since the last snapshot
	snapshotting    atomic.Bool
	// inline: the log's waited append is a memory copy (or there is no
	// log), so commits append while holding mu instead of releasing it.
	inline bool
	batch  Batch // reused by appendLocked, under mu
	// maxConflictKeys is the conflict map's high-water mark, for benchmarks.
	maxConflictKeys int
	// realClock: Options.Now is time.Now. The coordinator then reads it as
	// wallBase + the monotonic time since monoBase (now).
	realClock bool
	monoBase  time.Time
	wallBase  int64
	// siblings counts short transactions in progress that have not begun a
	// log write, for a log that gathers (watcher non-nil).
	siblings atomic.Int64
	watcher  siblingWatcher

	stats   counters
	latency histogram

	// sweepParked (under mu): the sweeper found nothing in progress and
	// waits on sweepWake, which the next start signals, instead of ticking.
	sweepParked bool
	sweepWake   chan struct{}

	stop chan struct{}
	done sync.WaitGroup
}

type counters struct {
	started, committed, aborted, conflicts, invalidated, timedOut, pruned uint64
}

// Open recovers the coordinator's state from opts.Log (snapshot + replay) and
// starts its background expiry sweeper.
func Open(opts Options) (*Coordinator, error) {
	opts.withDefaults()
	if opts.ReserveBlock > MaxReserveBlock {
		return nil, fmt.Errorf("%w: Options.ReserveBlock %d is over the limit %d", ErrMisuse, opts.ReserveBlock, uint64(MaxReserveBlock))
	}
	// A nil *FileLog (an open whose error was dropped) is no nil Log, which
	// keeps everything in memory: using it would panic.
	if v := reflect.ValueOf(opts.Log); opts.Log != nil && v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("%w: Options.Log is a nil %T", ErrMisuse, opts.Log)
	}
	c := &Coordinator{
		opts:        opts,
		log:         opts.Log,
		nextPointer: 1,
		inProgress:  make(map[uint64]*txState),
		invalid:     emptyInvalid,
		dirty:       true,
		conflicts:   newConflictIndex(),
		sweepWake:   make(chan struct{}, 1),
		stop:        make(chan struct{}),
	}
	c.realClock = opts.realClock
	c.monoBase = time.Now()
	c.wallBase = c.monoBase.UnixNano()
	c.inline = c.log == nil
	if il, ok := c.log.(interface{ inlineAppend() bool }); ok {
		c.inline = il.inlineAppend()
	}
	if w, ok := c.log.(siblingWatcher); ok && w.watchSiblings(c.siblings.Load) {
		c.watcher = w
	}
	if c.log != nil {
		state, edits, err := c.log.Recover()
		if err != nil {
			return nil, fmt.Errorf("tx: recover: %w", err)
		}
		refused := c.restore(state, edits)
		if opts.EndRecoveredTransactions {
			c.endRecovered()
		} else if refused {
			// The refusal is in no log record: replayed once the holder
			// has ended, the log would let the refused one hold the key,
			// which may have committed since, and commit. The snapshot
			// keeps it (a crash before it lands recovers the same way).
			if err := c.Snapshot(); err != nil {
				return nil, fmt.Errorf("tx: recover: %w", err)
			}
		}
	}
	if opts.ExpiryInterval > 0 {
		c.done.Add(1)
		go c.sweep(opts.ExpiryInterval)
	}
	return c, nil
}

// Close stops the sweeper and flushes and closes the log. Transactions still in
// progress that the log knows (long ones, and short ones past CanCommit or a
// Checkpoint) are recovered as in progress by the next Open, until they time
// out; a short one before its CanCommit wrote nothing and is forgotten (its
// pointer is never reused).
func (c *Coordinator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.done.Wait()
	if c.watcher != nil {
		c.watcher.pauseGathering(true) // for good: see Snapshot
	}
	c.gate.Lock() // no commit in flight from here on
	defer c.gate.Unlock()
	if c.log != nil {
		err := c.log.Append(&Batch{Wait: true, closing: true})
		return errors.Join(err, c.log.Close())
	}
	return nil
}

// checkOpenLocked returns the error that stops all work, if any.
func (c *Coordinator) checkOpenLocked() error {
	if c.failed != nil {
		return c.failed
	}
	if c.closed {
		return ErrClosed
	}
	return nil
}

// fail stops the coordinator after a log failure: it can no longer promise
// that what it acknowledges survives, so it acknowledges nothing more.
func (c *Coordinator) failLocked(err error) error {
	if c.failed == nil {
		c.failed = fmt.Errorf("%w: %v", ErrLogFailed, err)
	}
	return c.failed
}

// appendLocked logs e; with wait it returns once e is durable. Called with
// c.mu held so that the log's order is the order of state changes.
func (c *Coordinator) appendLocked(e Edit, wait bool) error {
	if c.log == nil {
		return nil
	}
	// One batch reused under mu: logs do not keep it past Append.
	c.batch.Edits = append(c.batch.Edits[:0], e)
	return c.appendBatchLocked(wait)
}

// editsFor appends e about st to dst, after st's START if that is not
// logged yet (in the same write, so that recovery always sees the START
// first); starts says whether it did.
func editsFor(dst []Edit, st *txState, e Edit) (edits []Edit, starts bool) {
	if starts = !st.logged; starts {
		dst = append(dst, startEdit(st))
	}
	return append(dst, e), starts
}

// appendForLocked logs e about st (editsFor) while holding mu.
func (c *Coordinator) appendForLocked(st *txState, e Edit, wait bool) error {
	if c.log == nil {
		return nil
	}
	var starts bool
	c.batch.Edits, starts = editsFor(c.batch.Edits[:0], st, e)
	err := c.appendBatchLocked(wait)
	if starts && !refusedWhole(err) { // refused whole: no START either
		st.logged = true
	}
	return err
}

func (c *Coordinator) appendBatchLocked(wait bool) error {
	c.batch.Wait = wait
	err := c.log.Append(&c.batch)
	clear(c.batch.Edits) // drop references to keys
	if err != nil {
		if refusedWhole(err) {
			return err // refused whole: nothing was written
		}
		return c.failLocked(err)
	}
	c.noteLogged(true)
	return nil
}

// newPointerLocked hands out the next write pointer, durably reserving a new
// block first when the current one is used up.
func (c *Coordinator) newPointerLocked() (uint64, error) {
	p := c.nextPointer
	if c.log != nil && p >= c.reserved {
		upTo := p + c.opts.ReserveBlock
		if err := c.appendLocked(Edit{Kind: EditReserve, Pointer: upTo}, true); err != nil {
			return 0, err
		}
		c.reserved = upTo
	}
	c.nextPointer++
	return p, nil
}

// MaxTimeout is the longest timeout StartShort accepts (Options.MaxTimeout).
func (c *Coordinator) MaxTimeout() time.Duration { return c.opts.MaxTimeout }

// StartShort starts a short transaction that times out after timeout.
func (c *Coordinator) StartShort(timeout time.Duration) (*Tx, error) {
	if timeout <= 0 || timeout > c.opts.MaxTimeout {
		return nil, fmt.Errorf("%w: %v (want > 0 and <= %v)", ErrInvalidTimeout, timeout, c.opts.MaxTimeout)
	}
	return c.start(Short, timeout)
}

// StartLong starts a long transaction (lifetime Options.LongTimeout) for batch
// work that uses Checkpoint to bound the size of each write.
func (c *Coordinator) StartLong() (*Tx, error) {
	return c.start(Long, c.opts.LongTimeout)
}

func (c *Coordinator) start(kind Kind, timeout time.Duration) (*Tx, error) {
	now := c.now()
	expires := now + int64(timeout)
	if expires < now { // a huge timeout (MaxTimeout, LongTimeout): never, not long ago
		expires = math.MaxInt64
	}
	// Allocate before taking the lock: under contention nearly every start
	// follows a commit and so rebuilds the snapshot, and allocating is most
	// of what that costs. The size is a hint; a short one is cloned anyway.
	st := &txState{kind: kind, expires: expires}
	tx := &Tx{Kind: kind}
	spare := &snapshot{excluded: make([]uint64, 0, c.orderedHint.Load()+8)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkOpenLocked(); err != nil {
		return nil, err
	}
	id, err := c.newPointerLocked()
	if err != nil {
		return nil, err
	}
	st.id, st.startSeq = id, c.conflicts.seq
	c.inProgress[id] = st
	c.ordered = append(c.ordered, id)
	c.stats.started++
	if c.sweepParked {
		c.sweepParked = false
		c.sweepWake <- struct{}{} // never blocks: only a parked sweeper drains it, once per park
	}
	if c.watcher != nil && kind == Short {
		st.sibling = true
		c.siblings.Add(1)
	}
	if kind == Long {
		// A long transaction's checkpoints and timeout matter to recovery
		// from the start; a short one is logged at CanCommit. st.logged
		// stays false all the same, so that its first waited edit (a
		// checkpoint, CanCommit) carries the START again: this unwaited
		// one may ride in another transaction's batch, which a BadgerLog
		// can land after that edit's, or lose at a crash while it lands.
		c.appendLocked(startEdit(st), false)
	}
	tx.ID, tx.WritePointer, tx.snap = id, id, c.snapshotLocked(spare)
	return tx, nil
}

// snapshotLocked returns the current shared snapshot, rebuilding it (into
// spare, when given and large enough) only when a commit, abort or
// invalidation changed what new transactions see.
func (c *Coordinator) snapshotLocked(spare *snapshot) *snapshot {
	if !c.dirty {
		return c.snap
	}
	n, _ := slices.BinarySearch(c.ordered, c.readPointer+1)
	if spare == nil || cap(spare.excluded) < n {
		spare = &snapshot{}
	}
	spare.readPointer = c.readPointer
	spare.excluded = append(spare.excluded[:0], c.ordered[:n]...)
	spare.invalid = c.invalid
	c.snap = spare
	c.orderedHint.Store(int64(len(c.ordered)))
	c.dirty = false
	return c.snap
}

// now is the coordinator's clock in Unix nanoseconds. The real one is read
// as the wall time at Open plus the monotonic time since: one clock read
// where time.Now takes two (a visible share of a commit's cost on a VM), and
// a timeout is a duration, which a step of the wall clock must not stretch
// or cut short.
func (c *Coordinator) now() int64 { return c.nowAt(c.sinceOpen()) }

// nowAt is now for a reading of sinceOpen (commit reuses its latency's).
func (c *Coordinator) nowAt(sinceOpen time.Duration) int64 {
	if c.realClock {
		return c.wallBase + int64(sinceOpen)
	}
	return c.opts.Now().UnixNano()
}

// sinceOpen is the monotonic time since Open, for latencies.
func (c *Coordinator) sinceOpen() time.Duration { return time.Since(c.monoBase) }

// liveAtLocked returns the in-progress state of tx, invalidating it first if
// it had expired at now.
func (c *Coordinator) liveAtLocked(tx *Tx, now int64) (*txState, error) {
	if err := c.checkOpenLocked(); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, notInProgress(0, "is nil")
	}
	st, ok := c.inProgress[tx.ID]
	if !ok {
		return nil, notInProgress(tx.ID, "is unknown, finished, timed out or invalidated")
	}
	if st.finalizing {
		return nil, notInProgress(tx.ID, "is already committing")
	}
	if now > st.expires {
		c.expireLocked(st)
		return nil, notInProgress(tx.ID, "timed out")
	}
	return st, nil
}

// HashKeys turns change keys into the 64-bit hashes the coordinator tracks.
// Two different keys share a hash with probability 2^-64: at worst a spurious
// conflict, never a missed one.
func (c *Coordinator) hashKeys(changes [][]byte) ([]uint64, error) {
	if len(changes) > c.opts.MaxChangeKeys {
		return nil, fmt.Errorf("%w: %d change keys (limit %d)", ErrTooLarge, len(changes), c.opts.MaxChangeKeys)
	}
	size := 0
	for _, k := range changes {
		size += len(k)
	}
	if size > c.opts.MaxChangeBytes {
		return nil, fmt.Errorf("%w: %d bytes of change keys (limit %d)", ErrTooLarge, size, c.opts.MaxChangeBytes)
	}
	if len(changes) == 0 {
		return nil, nil
	}
	// Duplicates need no removal: the conflict index tolerates them.
	keys := make([]uint64, len(changes))
	for i, k := range changes {
		keys[i] = xxhash.Sum64(k)
	}
	return keys, nil
}

// CanCommit checks tx's change keys against every transaction that committed
// (or is committing) since tx started, and reserves them: from now on
// overlapping transactions conflict with tx. Participants persist after it.
func (c *Coordinator) CanCommit(tx *Tx, changes [][]byte) error {
	keys, err := c.hashKeys(changes)
	if err != nil {
		return err
	}
	now := c.now() // read outside mu: a clock read is not free here
	c.gate.RLock() // a snapshot must not fall between this change and its edit
	defer c.gate.RUnlock()
	m := muHeld{mu: &c.mu}
	defer m.release()
	m.lock()
	st, err := c.liveAtLocked(tx, now)
	if err != nil {
		return err
	}
	was := st.reservation()
	if err := c.reserveKeysLocked(st, keys); err != nil {
		st.refused = true
		return err
	}
	st.committing, st.refused = true, false
	committing := Edit{Kind: EditCommitting, TxID: st.id, Keys: keys}
	if c.inline {
		err := c.appendForLocked(st, committing, true)
		if err == nil {
			c.droppedLocked(st)
		} else if refusedWhole(err) {
			c.unreserveLocked(st, was)
		}
		return err
	}
	edits, starts := editsFor(nil, st, committing)
	st.logged = true // set now: an Abort racing the write must log its ABORTED
	sibling := c.writingLocked(st)
	m.unlock()
	// Participants persist after this returns, so it must be durable: an
	// unfinished transaction that may have persisted is invalidated on recovery.
	_, err = c.appendLogged(edits, nil, false, sibling)
	if err == nil && len(was.keys) > 0 { // it may have dropped some
		m.lock()
		c.droppedLocked(st)
	} else if refusedWhole(err) { // refused whole: no START either
		m.lock()
		if starts {
			st.logged = false
		}
		c.unreserveLocked(st, was)
	}
	return err
}

// muHeld is c.mu for a function that unlocks and locks it along the way.
// Deferred, release unlocks it if still held: a panic under it (a log's
// bug) must propagate with it free, or whoever recovers the panic and then
// takes mu (a Context's abort path, to end the transaction) hangs.
type muHeld struct {
	mu   *sync.Mutex
	held bool
}

func (m *muHeld) lock()   { m.mu.Lock(); m.held = true }
func (m *muHeld) unlock() { m.held = false; m.mu.Unlock() }

func (m *muHeld) release() {
	if m.held {
		m.unlock()
	}
}

// reservation is what CanCommit (or a one-step commit) changes of st before
// its log write, for unreserveLocked.
type reservation struct {
	keys       []uint64
	committing bool
}

func (st *txState) reservation() reservation {
	return reservation{keys: st.keys, committing: st.committing}
}

// unreserveLocked undoes reserveKeysLocked after the log refused the write
// (too large, a bad staged write: nothing was written): the new keys are let
// go and the ones held before are held again (none was let go meanwhile:
// those the write dropped stayed held until it landed). Like a conflict, it
// leaves st's Commit refused until a CanCommit of it passes: a Commit now
// would make visible writes whose COMMITTING record never landed.
func (c *Coordinator) unreserveLocked(st *txState, was reservation) {
	if c.inProgress[st.id] != st {
		return // ended meanwhile (an abort, a timeout): its keys were released
	}
	c.conflicts.release(st.id, st.keys)
	c.conflicts.release(st.id, st.dropping)
	st.keys, st.dropping, st.committing, st.refused = nil, nil, was.committing, true
	if len(was.keys) == 0 {
		return
	}
	if _, ok := c.conflicts.checkAndHold(st.id, st.startSeq, was.keys); ok {
		st.keys = was.keys
	}
}

// appendLogged writes edits (and writes) without holding c.mu, so that
// concurrent callers share one sync. Deferred, with a
// DeferredLog, it returns before the sync with a Pending to wait on;
// otherwise once durable. On an error other than a refusal (refusedWhole:
// nothing written) the outcome is unknown and the coordinator stops.
func (c *Coordinator) appendLogged(edits []Edit, writes []Write, deferred, sibling bool) (Pending, error) {
	if c.log == nil {
		return Pending{}, nil
	}
	b := &Batch{Edits: edits, Writes: writes, Wait: true, patient: true, sibling: sibling}
	var ticket uint64
	var err error
	if dl, ok := c.log.(DeferredLog); ok && deferred {
		ticket, err = dl.AppendDeferred(b)
	} else {
		err = c.log.Append(b)
	}
	if refusedWhole(err) {
		return Pending{}, err
	}
	if err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return Pending{}, c.failLocked(err)
	}
	c.noteLogged(false)
	if ticket == 0 {
		return Pending{}, nil
	}
	return Pending{c: c, ticket: ticket}, nil
}

func (c *Coordinator) reserveKeysLocked(st *txState, keys []uint64) error {
	if st.recovered {
		for _, k := range keys {
			if !slices.Contains(st.keys, k) {
				c.stats.conflicts++
				return &ConflictError{TxID: st.id}
			}
		}
	}
	pending, ok := c.conflicts.checkAndHold(st.id, st.startSeq, keys)
	if !ok {
		// A refused call changes nothing: what an earlier CanCommit held
		// stays held (checkAndHold let go of those it had re-taken). Its
		// participants may have persisted, and its COMMITTING edit, which
		// recovery trusts, still names them.
		c.conflicts.hold(st.id, st.keys)
		c.conflicts.hold(st.id, st.dropping)
		c.stats.conflicts++
		return &ConflictError{TxID: st.id, Pending: pending}
	}
	// Reserved again: the new keys replace the old once the new record is
	// durable (droppedLocked); until then the old ones stay held too.
	st.dropping = append(st.dropping, st.keys...)
	st.keys = keys
	return nil
}

// droppedLocked lets go of the keys st's last CanCommit or commit dropped,
// now that its record is durable (or st ended: then they are released).
func (c *Coordinator) droppedLocked(st *txState) {
	if len(st.dropping) == 0 {
		return
	}
	c.conflicts.release(st.id, st.dropping)
	st.dropping = nil
	if c.inProgress[st.id] == st {
		c.conflicts.hold(st.id, st.keys) // those it named again
	}
}

// Commit makes tx's writes visible to every transaction that starts after it
// returns. Participants must have persisted (after CanCommit) before. After a
// refused CanCommit it is refused too (a *ConflictError): abort.
func (c *Coordinator) Commit(tx *Tx) error {
	_, err := c.commit(tx, nil, nil, false, false)
	return err
}

// CommitWith commits in one step: conflict check of changes, then writes and
// the commit record in one atomic, durable log write (one sync instead of
// CanCommit's and Commit's two). It is the single-store fast path that
// Context.Finish takes for Stagers; writes need an AtomicLog. Use it without
// writes only when no participant persisted anything for tx beforehand.
func (c *Coordinator) CommitWith(tx *Tx, changes [][]byte, writes []Write) error {
	_, err := c.commitWith(tx, changes, writes, false)
	return err
}

// CommitWithDeferred is CommitWith for a caller that pipelines: it returns
// once the commit record (and writes) are written and the commit is visible
// to transactions that start after it, before the log's sync; Pending.Wait
// returns once the commit is durable. Wait before telling anything outside
// the coordinator's log that tx committed (an HTTP client, a file, a
// metric): until then a power loss may undo it. A killed process loses
// nothing written. What a power loss can do to transactions that read it
// before its sync: specs/transactions.md §2. With a log that is not a
// DeferredLog it is CommitWith.
func (c *Coordinator) CommitWithDeferred(tx *Tx, changes [][]byte, writes []Write) (Pending, error) {
	p, err := c.commitWith(tx, changes, writes, true)
	if p.c != nil {
		c.deferredCommits.Add(1)
	}
	return p, err
}

// commitWith is the one-step commit; deferred makes it visible before its
// sync (a Pending to wait on), else it is visible only once durable.
func (c *Coordinator) commitWith(tx *Tx, changes [][]byte, writes []Write, deferred bool) (Pending, error) {
	if _, atomic := c.log.(AtomicLog); len(writes) > 0 && !atomic {
		return Pending{}, fmt.Errorf("%w: CommitWith: staged writes need an AtomicLog (BadgerLog); this coordinator's log cannot store them", ErrMisuse)
	}
	keys, err := c.hashKeys(changes)
	if err != nil {
		return Pending{}, err
	}
	return c.commit(tx, keys, writes, true, deferred)
}

// Pending is a commit that is visible but may not be durable yet (see
// CommitWithDeferred). The zero Pending is durable.
type Pending struct {
	c      *Coordinator
	ticket uint64
}

// Wait returns once the commit is durable. An error means its fate is
// unknown; the coordinator has stopped (ErrLogFailed), as after a failed
// durable append.
func (p Pending) Wait() error {
	if p.c == nil {
		return nil
	}
	if err := p.c.log.(DeferredLog).Durable(p.ticket); err != nil {
		p.c.mu.Lock()
		defer p.c.mu.Unlock()
		return p.c.failLocked(err)
	}
	return nil
}

func (c *Coordinator) commit(tx *Tx, keys []uint64, writes []Write, staged, deferred bool) (Pending, error) {
	began := c.sinceOpen()
	if !c.inline {
		// Taken before the checks, as CanCommit does: Close (and a
		// snapshot) waits for the gate, so a commit that passed its checks
		// writes to a log that is still open. Taken after them, a Close
		// in between closed the log first.
		c.gate.RLock()
		defer c.gate.RUnlock()
	}
	m := muHeld{mu: &c.mu}
	defer m.release()
	m.lock()
	st, err := c.liveAtLocked(tx, c.nowAt(began))
	if err != nil {
		return Pending{}, err
	}
	was := st.reservation()
	if staged {
		if err := c.reserveKeysLocked(st, keys); err != nil {
			st.refused = true
			return Pending{}, err
		}
	} else if st.refused {
		return Pending{}, &ConflictError{TxID: st.id}
	}
	if c.inline {
		// The log append is a memory copy: one critical section for the
		// whole commit beats three under contention.
		err = c.appendLocked(c.committedEdit(st), true)
		if err == nil {
			c.conflicts.commit(st.id, st.keys)
			st.keys = nil
			c.finishLocked(st)
			c.stats.committed++
		} else if staged && refusedWhole(err) {
			c.unreserveLocked(st, was)
		}
		m.unlock()
		if err == nil {
			c.latency.observe(c.sinceOpen() - began)
		}
		return Pending{}, err
	}
	st.finalizing = true
	sibling := c.writingLocked(st)
	m.unlock()
	if h := testHookCommitChecked; h != nil {
		h()
	}
	// On error the outcome is unknown and the append has stopped the
	// coordinator rather than guess.
	pending, err := c.appendLogged([]Edit{c.committedEdit(st)}, writes, deferred, sibling)
	m.lock()
	if err == nil {
		c.conflicts.commit(st.id, st.keys)
		st.keys = nil // committed: nothing to release
		c.finishLocked(st)
		c.stats.committed++
	} else if refusedWhole(err) {
		st.finalizing = false // nothing landed: the caller aborts
		if staged {
			c.unreserveLocked(st, was)
		}
	}
	m.unlock()
	if err == nil {
		c.latency.observe(c.sinceOpen() - began)
	}
	return pending, err
}

// testHookCommitChecked, set by tests, runs in a commit whose log write is
// outside mu, between its checks and that write.
var testHookCommitChecked func()

// finishLocked removes st from the in-progress set and advances the read pointer.
func (c *Coordinator) finishLocked(st *txState) {
	if st.sibling {
		c.unsibling(st, true)
	}
	delete(c.inProgress, st.id)
	c.removeOrderedLocked(st.id)
	for _, p := range st.pointers {
		c.removeOrderedLocked(p)
	}
	c.conflicts.release(st.id, st.keys)
	c.droppedLocked(st)
	c.readPointer = max(c.readPointer, st.maxPointer())
	c.dirty = true
	if c.conflicts.rotated {
		c.maxConflictKeys = max(c.maxConflictKeys, c.conflicts.size())
		c.conflicts.pruneBelow(c.oldestStartSeqLocked() + 1)
	}
}

// siblingWatcher is a log whose group commit can hold a sync back for
// transactions about to append (BadgerLog). watchSiblings hands it the count
// of short transactions in progress that have not begun a log write
// (CanCommit's or the commit's), and reports whether it uses it.
type siblingWatcher interface {
	watchSiblings(count func() int64) bool
	// siblingWriting: a sibling is about to write (a batch marked sibling
	// follows); called before the count drops, so that the log, which
	// counts the write in flight until it lands, never sees neither.
	siblingWriting()
	// siblingLeft: a sibling ended without writing (an abort, a timeout),
	// so a gathering leader stops waiting for it.
	siblingLeft()
	// pauseGathering(true) ends a gather under way and stops new ones
	// until pauseGathering(false); a snapshot pauses while it waits for and
	// holds the gate.
	pauseGathering(on bool)
}

// writingLocked hands st over from the sibling count to the log's writes in
// flight, as st begins a log write; it reports whether st was counted.
func (c *Coordinator) writingLocked(st *txState) bool {
	if !st.sibling {
		return false
	}
	c.watcher.siblingWriting()
	c.unsibling(st, false)
	return true
}

// unsibling stops counting st as a sibling: it begins a log write (ended
// false) or it ended without one. Callers check st.sibling first (inlined
// on the paths that never count).
func (c *Coordinator) unsibling(st *txState, ended bool) {
	st.sibling = false
	c.siblings.Add(-1)
	if ended {
		c.watcher.siblingLeft()
	}
}

// oldestStartSeqLocked bounds the committed keys a transaction in progress
// may still conflict with. Recovered ones do not count: they conflict on
// every key they did not hold, which nobody else can commit meanwhile.
func (c *Coordinator) oldestStartSeqLocked() uint64 {
	oldest := c.conflicts.seq
	for _, st := range c.inProgress {
		if !st.recovered {
			oldest = min(oldest, st.startSeq)
		}
	}
	return oldest
}

func (c *Coordinator) removeOrderedLocked(p uint64) {
	if i, ok := slices.BinarySearch(c.ordered, p); ok {
		c.ordered = slices.Delete(c.ordered, i, i+1)
	}
}

// Abort ends tx without committing. Its participants must have rolled back
// their writes. A long transaction is invalidated instead, because its
// checkpoints may have persisted data that nobody tracks.
func (c *Coordinator) Abort(tx *Tx) error {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.liveAtLocked(tx, now)
	if err != nil {
		return err
	}
	if st.kind == Long {
		c.invalidateLocked(st)
		return nil
	}
	c.finishLocked(st)
	c.stats.aborted++
	if st.logged { // else the log never heard of it
		c.appendLocked(Edit{Kind: EditAborted, TxID: st.id, Pointers: st.loggedPointers()}, false)
	}
	return nil
}

// Invalidate ends tx and marks all its write pointers invalid: their data stays
// invisible to every transaction until a Pruner reports it gone. Use it when a
// rollback failed.
func (c *Coordinator) Invalidate(tx *Tx) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkOpenLocked(); err != nil {
		return err
	}
	if tx == nil {
		return notInProgress(0, "is nil")
	}
	st, ok := c.inProgress[tx.ID]
	if !ok || st.finalizing {
		return notInProgress(tx.ID, "is unknown or finished")
	}
	c.invalidateLocked(st)
	return nil
}

func (c *Coordinator) invalidateLocked(st *txState) {
	ptrs := st.allPointers()
	c.invalid = c.invalid.with(ptrs)
	c.finishLocked(st)
	c.stats.invalidated++
	c.appendLocked(Edit{Kind: EditInvalid, TxID: st.id, Pointers: ptrs}, false)
}

func (c *Coordinator) expireLocked(st *txState) {
	c.invalidateLocked(st)
	c.stats.timedOut++
}

// Checkpoint gives tx a new write pointer under the same read snapshot, so a
// long batch can persist part of its work and keep going. The returned Tx
// replaces tx; hand it to every participant (Context.Checkpoint does).
func (c *Coordinator) Checkpoint(tx *Tx) (*Tx, error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := c.liveAtLocked(tx, now)
	if err != nil {
		return nil, err
	}
	p, err := c.newPointerLocked()
	if err != nil {
		return nil, err
	}
	st.pointers = append(st.pointers, p)
	c.ordered = append(c.ordered, p)
	// The checkpoint may persist data: recovery must know the pointer.
	if err := c.appendForLocked(st, Edit{Kind: EditCheckpoint, TxID: st.id, Pointer: p}, true); err != nil {
		return nil, err
	}
	next := *tx
	// From the coordinator's record, not tx's: a tx that an earlier
	// checkpoint replaced would lose that checkpoint's pointer, and the
	// transaction would no longer see what it wrote under it.
	next.Checkpoints = st.allPointers()[:len(st.pointers)]
	next.WritePointer = p
	return &next, nil
}

// ExpireTimedOut invalidates every expired in-progress transaction now and
// returns how many it invalidated. The sweeper calls it periodically.
func (c *Coordinator) ExpireTimedOut() int {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.checkOpenLocked() != nil {
		return 0
	}
	var expired []*txState
	for _, st := range c.inProgress {
		if !st.finalizing && now > st.expires {
			expired = append(expired, st)
		}
	}
	if len(expired) == 0 {
		return 0
	}
	var ptrs []uint64
	for _, st := range expired {
		ptrs = append(ptrs, st.allPointers()...)
	}
	// One copy of the invalid list for the whole sweep.
	c.invalid = c.invalid.with(ptrs)
	for _, st := range expired {
		c.finishLocked(st)
		c.stats.invalidated++
		c.stats.timedOut++
		c.appendLocked(Edit{Kind: EditInvalid, TxID: st.id, Pointers: st.allPointers()}, false)
	}
	c.pruneInvalidLocked()
	return len(expired)
}

func (c *Coordinator) endRecovered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.inProgress {
		c.invalidateLocked(st)
	}
	c.pruneInvalidLocked()
}

// sweep expires timed-out transactions every tick. With nothing in progress
// nothing can time out, so it parks until the next start rather than waking
// an idle process ten times a second; pruning needs no tick then either (a
// Pruner's report prunes on the spot).
func (c *Coordinator) sweep(every time.Duration) {
	defer c.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.ExpireTimedOut()
		c.pruneInvalid()
		c.mu.Lock()
		c.sweepParked = len(c.inProgress) == 0
		parked := c.sweepParked
		c.mu.Unlock()
		if !parked {
			continue
		}
		t.Stop()
		select {
		case <-c.stop:
			return
		case <-c.sweepWake:
		}
		t.Reset(every)
	}
}

// ReadPointer is the newest committed write pointer.
func (c *Coordinator) ReadPointer() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readPointer
}

// VisibilityUpperBound: every version below it is settled (committed, aborted or
// invalid) and no transaction in progress can still write below it.
func (c *Coordinator) VisibilityUpperBound() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ordered) > 0 {
		return c.ordered[0]
	}
	return c.readPointer + 1
}

// InvalidList returns a copy of the invalid pointers, sorted.
func (c *Coordinator) InvalidList() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.invalid.ids)
}

// InProgress returns the ids of the transactions in progress, sorted.
func (c *Coordinator) InProgress() []uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]uint64, 0, len(c.inProgress))
	for id := range c.inProgress {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
