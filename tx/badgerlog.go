package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// BadgerLogOptions configure a BadgerLog.
type BadgerLogOptions struct {
	// Prefix of every key the log writes. Default "\x00tx/". Participants
	// sharing the DB must keep their keys out of it.
	Prefix []byte
	// Sync makes every waited Append durable before it returns, with group
	// commit: concurrent appends share one sync of the DB's write-ahead and
	// value-log files (see badgerSyncer). Open the DB with SyncWrites off:
	// Badger's own SyncWrites syncs its write-ahead log once per transaction,
	// which is far slower under concurrency.
	Sync bool
	// NoGather turns gathering off: a sync starts the moment the first
	// commit asks for it, as plain group commit does, instead of waiting
	// (at most about one sync) for the few transactions about to commit.
	// For latency-bound uses where each commit's own wait matters more than
	// how many syncs the disk does (see gatherLocked).
	NoGather bool
}

// BadgerLog keeps the edit log inside a Badger DB that participants also write
// to: the single-store fast path. A waited Append is one Badger transaction
// holding the edits and the participants' staged writes, so data and commit
// record are atomic. Durability follows the DB's SyncWrites option; Badger
// groups concurrent commits into one write and one sync.
//
// Keys: <prefix>log/<seq u64 BE> → encoded edits; <prefix>snap → the snapshot
// (CRC-framed, with the first log seq it does not cover).
type BadgerLog struct {
	db     *badger.DB
	prefix []byte

	mu      sync.Mutex
	seq     uint64 // next log key
	pending []byte // edits of unwaited appends, written with the next waited one

	sync   bool
	syncer *badgerSyncer
	// hooks are the DB's SyncHooks; without them a deferred commit is not
	// safe on power loss, and AppendDeferred syncs at once.
	hooks   *syncHooks
	smu     sync.Mutex
	scond   *sync.Cond
	done    uint64 // waited appends whose Badger commit returned
	synced  uint64 // of those, how many a finished sync covers
	syncing bool
	syncErr error
	// syncFailed: syncErr is set (read without smu by appends).
	syncFailed atomic.Bool

	// Gathering (see gatherLocked), under smu but for the atomics.
	noGather  bool
	siblings  func() int64 // the coordinator's count; nil: never gather
	writing   atomic.Int64 // siblings' writes begun and not landed
	joins     uint64       // siblings' writes landed during gathers
	gathering atomic.Bool  // a leader is holding its sync back
	urgent    uint64       // latest ticket of an impatient append
	syncAvg   time.Duration
	fruitless int          // gathers in a row that nobody joined or that ran out of time
	backoffs  int          // back-offs since a gather last paid off
	skip      int          // syncs left to run without gathering
	paused    atomic.Int32 // >0: a snapshot or Close is waiting; do not gather
	// gatherFor, when set (tests), replaces the bound of one average sync.
	gatherFor time.Duration
	gathers   gatherStats
	syncs     uint64
}

// gatherStats count gathers: begun, joined by at least one sibling's write,
// and ended by their time limit (the rest ended when nobody was left to
// wait for, for an impatient append, or for a snapshot or Close).
type gatherStats struct{ held, joined, expired uint64 }

// syncCounts implements syncCounter.
func (l *BadgerLog) syncCounts() (syncs, gathers, joined uint64) {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.syncs, l.gathers.held, l.gathers.joined
}

// NewBadgerLog returns a log in db. Pass it as Options.Log to Open.
func NewBadgerLog(db *badger.DB, opts BadgerLogOptions) (*BadgerLog, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: badger log: nil DB", ErrMisuse)
	}
	p := opts.Prefix
	if len(p) == 0 {
		p = []byte("\x00tx/")
	}
	l := &BadgerLog{db: db, prefix: append([]byte(nil), p...), sync: opts.Sync, noGather: opts.NoGather}
	if opts.Sync && !db.Opts().InMemory {
		l.syncer = newBadgerSyncer(db)
		l.hooks = hooksOf(db)
	}
	l.scond = sync.NewCond(&l.smu)
	return l, nil
}

// Store returns the *badger.DB, so that Stagers writing to it take the fast path.
func (l *BadgerLog) Store() any { return l.db }

// Prefix returns the key prefix the log owns.
func (l *BadgerLog) Prefix() []byte { return l.prefix }

func (l *BadgerLog) logKey(seq uint64) []byte {
	k := append(append([]byte(nil), l.prefix...), "log/"...)
	return binary.BigEndian.AppendUint64(k, seq)
}

func (l *BadgerLog) snapKey() []byte {
	return append(append([]byte(nil), l.prefix...), "snap"...)
}

// Recover reads the snapshot and the log entries after it.
func (l *BadgerLog) Recover() (*State, []Edit, error) {
	var state *State
	var edits []Edit
	from := uint64(0)
	err := l.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(l.snapKey())
		if err == nil {
			b, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			payload, size, ok := nextFrame(b)
			if !ok || size != len(b) || len(payload) < 8 {
				return fmt.Errorf("%w: badger log snapshot", ErrCorrupt)
			}
			from = binary.BigEndian.Uint64(payload)
			if state, err = decodeState(payload[8:]); err != nil {
				return err
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		l.seq = from
		it := txn.NewIterator(badger.IteratorOptions{Prefix: l.logKey(0)[:len(l.prefix)+4]})
		defer it.Close()
		for it.Seek(l.logKey(from)); it.Valid(); it.Next() {
			k := it.Item().Key()
			seq := binary.BigEndian.Uint64(k[len(k)-8:])
			err := it.Item().Value(func(v []byte) error {
				var err error
				edits, err = decodeEdits(v, edits)
				return err
			})
			if err != nil {
				return fmt.Errorf("badger log entry %d: %w", seq, err)
			}
			l.seq = seq + 1
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return state, edits, nil
}

// Append writes a waited batch as one Badger transaction with its staged
// writes; unwaited edits wait for the next waited batch.
func (l *BadgerLog) Append(b *Batch) error {
	ticket, err := l.AppendDeferred(b)
	if err != nil || ticket == 0 {
		return err
	}
	return l.durable(ticket, !b.closing)
}

// AppendDeferred implements DeferredLog: Append without the sync. The ticket
// is 0 when there is nothing to wait for (no sync, or nothing written, or a
// DB opened without SyncHooks: then it has synced already).
func (l *BadgerLog) AppendDeferred(b *Batch) (uint64, error) {
	if b.Wait && l.sync {
		// Durability is lost for good: nothing written from now on can be
		// made durable, and a deferred commit would turn visible first.
		if err := l.syncFailure(); err != nil {
			l.siblingFailed(b)
			return 0, err
		}
		if h := testHookDurabilityChecked; h != nil {
			h()
		}
	}
	l.mu.Lock()
	others := len(l.pending) // unwaited edits of other transactions
	for i := range b.Edits {
		l.pending = appendEdit(l.pending, &b.Edits[i])
	}
	if !b.Wait || (len(l.pending) == 0 && len(b.Writes) == 0) {
		l.mu.Unlock()
		l.siblingFailed(b)
		return 0, nil
	}
	value := l.pending
	l.pending = nil
	seq := l.seq
	l.seq++
	l.mu.Unlock()

	txn := l.db.NewTransaction(true)
	defer txn.Discard()
	err := txn.Set(l.logKey(seq), value)
	for i := 0; err == nil && i < len(b.Writes); i++ {
		w := &b.Writes[i]
		if w.Delete {
			err = txn.Delete(w.Key)
		} else {
			err = txn.Set(w.Key, w.Value)
		}
	}
	// Badger refused a write before the commit (too big, an empty or
	// reserved key, a key or value over its limits): nothing was written.
	refused := err != nil
	if err == nil {
		err = txn.Commit()
	}
	if err != nil {
		l.siblingFailed(b)
	}
	if tooBig := errors.Is(err, badger.ErrTxnTooBig); tooBig || refused {
		// This batch's own edits go (its caller aborts); the other
		// transactions' edits ride with the next waited write.
		l.mu.Lock()
		l.pending = append(value[:others:others], l.pending...)
		l.mu.Unlock()
		if tooBig {
			return 0, fmt.Errorf("%w: the staged writes do not fit in one atomic Badger write: %v", ErrTooLarge, err)
		}
		return 0, fmt.Errorf("%w: %v", ErrBadWrite, err)
	}
	if err != nil || !l.sync {
		return 0, err
	}
	// Again now that it is written: a sync that failed since the check
	// above (one running meanwhile, or the sync at the rotation this very
	// write set off) leaves this record with no sync to make it durable,
	// so it must not turn visible. Later failures find it written first:
	// visible before its sync, as every deferred commit is.
	if err := l.syncFailure(); err != nil {
		l.siblingFailed(b)
		return 0, err
	}
	l.smu.Lock()
	l.done++
	ticket := l.done
	if !b.patient {
		l.urgent = ticket
	}
	if b.sibling {
		l.writing.Add(-1) // landed, with done: a leader sees one or the other
		if l.gathering.Load() {
			l.joins++
		}
	}
	if l.gathering.Load() {
		l.scond.Broadcast()
	}
	l.smu.Unlock()
	if l.hooks == nil {
		// Not safe to show before its sync (see SyncHooks).
		return 0, l.durable(ticket, !b.closing)
	}
	return ticket, nil
}

// testHookDurabilityChecked, set by tests, runs in a waited append of a
// syncing log between its check for a failed sync and its write.
var testHookDurabilityChecked func()

// Durable implements DeferredLog with group commit: it returns once a sync
// that started after the ticket's write has finished. The first waiter runs
// it for everyone written so far; the rest wait for it (or for the next one)
// instead of syncing themselves.
func (l *BadgerLog) Durable(ticket uint64) error { return l.durable(ticket, true) }

// durable is Durable; counted says whether a sync it runs counts in
// Stats.LogSyncs (not Close's).
func (l *BadgerLog) durable(ticket uint64, counted bool) error {
	if ticket == 0 {
		return nil
	}
	l.smu.Lock()
	defer l.smu.Unlock()
	// A ticket a sync covered is durable, whatever later syncs did.
	for l.synced < ticket {
		if l.syncErr != nil {
			return l.syncErr
		}
		if l.syncing {
			l.scond.Wait()
			continue
		}
		l.syncing = true
		if l.syncer != nil && counted {
			l.syncs++
		}
		l.gatherLocked()
		target := l.done
		l.smu.Unlock()
		var err error
		var took time.Duration
		if l.syncer != nil {
			began := time.Now()
			err = l.hooks.gatedSync(l.syncer.sync)
			took = time.Since(began)
		}
		if err == nil && l.hooks != nil {
			err = l.hooks.failure()
		}
		l.smu.Lock()
		l.syncing = false
		l.syncAvg = (7*l.syncAvg + took) / 8
		if err != nil {
			l.syncErr = fmt.Errorf("tx: badger log sync: %w", err)
			l.syncFailed.Store(true)
		} else {
			l.synced = target
		}
		l.scond.Broadcast()
	}
	return nil
}

// syncFailure is the error of a failed sync (the log's, or the SyncHooks'
// at a rotation, which the next sync would report), nil if none failed.
func (l *BadgerLog) syncFailure() error {
	if l.syncFailed.Load() {
		l.smu.Lock()
		defer l.smu.Unlock()
		return l.syncErr
	}
	if l.hooks != nil {
		if err := l.hooks.failure(); err != nil {
			return fmt.Errorf("tx: badger log sync: %w", err)
		}
	}
	return nil
}

// watchSiblings implements siblingWatcher: a syncing log gathers.
func (l *BadgerLog) watchSiblings(count func() int64) bool {
	if l.syncer == nil || l.noGather {
		return false
	}
	l.smu.Lock()
	l.siblings = count
	l.smu.Unlock()
	return true
}

// siblingLeft implements siblingWatcher.
func (l *BadgerLog) siblingLeft() { l.wakeGatherer() }

// siblingWriting implements siblingWatcher.
func (l *BadgerLog) siblingWriting() { l.writing.Add(1) }

// siblingFailed ends the flight of a sibling's batch that wrote nothing.
func (l *BadgerLog) siblingFailed(b *Batch) {
	if b.sibling {
		l.writing.Add(-1)
		l.wakeGatherer()
	}
}

// wakeGatherer makes a gathering leader look again at what it waits for.
func (l *BadgerLog) wakeGatherer() {
	if l.gathering.Load() {
		l.smu.Lock()
		l.scond.Broadcast()
		l.smu.Unlock()
	}
}

// pauseGathering implements siblingWatcher: a snapshot about to take the
// coordinator's gate would hold up siblings that have not reached their
// write (they take the gate shared) until a gather's time runs out.
func (l *BadgerLog) pauseGathering(on bool) {
	if !on {
		l.paused.Add(-1)
		return
	}
	l.paused.Add(1)
	l.wakeGatherer() // ends a gather under way
}

// Gathering limits. A gather that nobody joins, or that runs out of time
// (a sibling sits idle in its transaction, so the count never reaches 0),
// costs its leader up to its limit — more on a busy machine, where the
// timer wakes late (about 1 ms on this VM). After fruitlessLimit of them in a
// row the log stops gathering for skipAfterFruitless syncs, doubling with
// every back-off until a gather pays off again (up to 32×), so idle or rare
// siblings cost almost nothing.
const (
	maxGather          = 2 * time.Millisecond
	maxGatherSiblings  = 8
	fruitlessLimit     = 3
	skipAfterFruitless = 32
	maxBackoffShift    = 5
)

// gatherLocked is called by a sync's leader, with smu held and syncing set,
// before it takes its target. Group commit alone starts a sync the moment
// the first commit asks, so a commit written a few microseconds later waits
// for that sync and then its own: two commits that alternate (a producer
// and its consumer, each waiting for its own commit before the next step)
// then cost a sync each. When short transactions are in progress that have
// not begun a log write (the coordinator's count), or siblings' writes are
// in flight, the leader waits until they have landed their writes or ended,
// at most one average sync time (beyond that,
// letting them wait for the next sync costs no more) — what PostgreSQL's
// commit_delay with commit_siblings does, with the delay bounded by the
// measured sync and cut short when the last expected sibling arrives. It
// gathers only for a few siblings (maxGatherSiblings): with many goroutines
// committing, group commit already fills each sync with what arrived during
// the last one, and a leader waiting for the last of many would stretch
// every cycle while each goroutine commits at most once per cycle. An
// impatient append (made under the coordinator's lock) never waits.
func (l *BadgerLog) gatherLocked() {
	limit := min(l.syncAvg, maxGather)
	if l.gatherFor > 0 {
		limit = l.gatherFor
	}
	if l.siblings == nil || limit == 0 || l.urgent > l.synced || l.paused.Load() > 0 {
		return
	}
	if l.skip > 0 {
		l.skip--
		return
	}
	if n := l.siblings() + l.writing.Load(); n == 0 || n > maxGatherSiblings {
		return
	}
	l.gathers.held++
	deadline := time.Now().Add(limit)
	from := l.joins
	l.gathering.Store(true)
	timer := time.AfterFunc(limit, l.wakeGatherer)
	hurried := func() bool {
		return l.siblings() == 0 && l.writing.Load() == 0 || l.urgent > l.synced || l.paused.Load() > 0
	}
	for !hurried() && time.Now().Before(deadline) {
		l.scond.Wait()
	}
	timer.Stop()
	l.gathering.Store(false)
	expired := !hurried()
	joined := l.joins > from // a sibling's write (not an impatient append)
	if expired {
		l.gathers.expired++
	}
	if joined {
		l.gathers.joined++
	}
	if joined && !expired {
		l.fruitless, l.backoffs = 0, 0
		return
	}
	if l.fruitless++; l.fruitless >= fruitlessLimit {
		l.fruitless = 0
		l.skip = skipAfterFruitless << min(l.backoffs, maxBackoffShift)
		l.backoffs++
	}
}

// Snapshot returns a function that stores s and deletes the log entries it covers.
func (l *BadgerLog) Snapshot(s *State) (func() error, error) {
	l.mu.Lock()
	l.pending = nil // reflected in s
	from := l.seq
	l.mu.Unlock()
	payload := binary.BigEndian.AppendUint64(nil, from)
	payload = append(payload, encodeState(s)...)
	return func() error {
		if err := l.db.Update(func(txn *badger.Txn) error {
			return txn.Set(l.snapKey(), appendFrame(nil, payload))
		}); err != nil {
			return err
		}
		if err := l.syncSnapshot(); err != nil {
			return err
		}
		// Drop covered entries; a crash midway leaves some, which Recover skips.
		wb := l.db.NewWriteBatch()
		defer wb.Cancel()
		err := l.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: l.logKey(0)[:len(l.prefix)+4]})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().KeyCopy(nil)
				if binary.BigEndian.Uint64(k[len(k)-8:]) >= from {
					break
				}
				if err := wb.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return wb.Flush()
	}, nil
}

// syncSnapshot makes the snapshot just written durable (a syncing log)
// before the synced entries it covers are deleted: written right after it,
// a power loss before the next group sync could keep the deletions and lose
// the snapshot (each memtable's write-ahead file replays on its own, and a
// large value lives in the value log), and with it those entries' commits.
// A failed sync fails the log, as a group sync's does.
func (l *BadgerLog) syncSnapshot() error {
	if l.syncer == nil {
		return nil
	}
	err := l.hooks.gatedSync(l.syncer.sync)
	if err == nil && l.hooks != nil {
		err = l.hooks.failure() // a sync at a rotation, as a group sync checks
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("tx: badger log sync: %w", err)
	l.smu.Lock()
	if l.syncErr == nil {
		l.syncErr = err
		l.syncFailed.Store(true)
	}
	l.smu.Unlock()
	return err
}

// Close writes pending edits and syncs every commit written, deferred ones
// included. It does not close the DB, which its owner shares.
func (l *BadgerLog) Close() error {
	err := l.Append(&Batch{Wait: true, closing: true})
	if err == nil && l.sync {
		// Deferred commits nobody waited for: durable before Close returns
		// (and a later Pending.Wait finds them synced).
		l.smu.Lock()
		last := l.done
		l.smu.Unlock()
		err = l.durable(last, false)
	}
	if l.syncer != nil {
		l.syncer.close()
	}
	return err
}
