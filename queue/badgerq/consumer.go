package badgerq

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// consumer reads for one instance of a group. Cursor rules (per group,
// partition and priority level; see levelState):
//
//   - The scan position only passes entries it has settled: delivered,
//     expired, or written by an invalid transaction (pointer below the
//     snapshot's first in-progress one and not visible).
//   - When the scan reaches the end of what the transaction may see, the
//     position moves to ReadPointer+1, and every pointer it passes that was
//     in progress becomes a hole. A producer that commits later lands behind
//     the position with exactly such a pointer; holes are read first on the
//     next dequeue, so nothing is skipped, and they are dropped once visible
//     and read, or once known invalid. Holes are few: at most the producers
//     in flight at one moment.
//   - Eviction may delete what lies below min(position, first hole) of every
//     group.
//
// The new state of each partition read is written with the consumer's
// transaction (staged on the fast path), so an abort leaves the committed
// state untouched and the same entries come again.
type consumer struct {
	b        *Backend
	q        *queueRT
	g        *groupRT
	instance int

	t         *tx.Tx
	work      map[int]*work
	persisted bool
	now       time.Time

	idx     []levelMax // scratch for readPartition
	prios   []uint8
	scratch []queue.Entry // Dequeue gathers here, then returns a copy

	rolled []rolledWork // scratch for Rollback

	// full: a Dequeue of the current transaction stopped at max, so its
	// partitions may hold more; releasing them wakes waiting consumers (a
	// FIFO peer, or the new owner after a rescale, may take them).
	full bool

	// ending is the id of the last transaction whose Stage, Persist or
	// Rollback began: from then on it may commit or change its slots, and
	// its leases are taken over only as wrote says (see leaseEndLocked).
	ending atomic.Uint64
	// wrote is the id of the last transaction whose Stage or Persist
	// returned, until its PostCommit or Rollback begins: nothing of it is
	// under way here any more. Once the coordinator ended it, it committed
	// (its PostCommit never ran, or has yet to) or never will (timed out
	// after its writes, which then never commit): a taker reads the
	// partition's committed state from the store and takes the lease over
	// (adoptLocked).
	wrote atomic.Uint64
	// open is the id of the transaction StartTx took until its
	// PostCommit or Rollback here (0: none): a StartTx while it is still
	// in progress is refused (queue.ErrInUse), and refused counts the
	// refusals whose Rollback (the Context's abort of the refused start)
	// is still to come and must leave the open transaction alone.
	open    atomic.Uint64
	refused atomic.Int32
}

// rolledWork is a changed partition as Rollback sees it.
type rolledWork struct {
	p          int
	w          *work
	keep, hold bool // keep its moves; the slot holds an uncommitted version
}

// work is a partition leased by the current transaction.
type work struct {
	slot      *slot
	prev      stateVersion
	st        partState
	changed   bool
	delivered uint64
	expired   uint64
}

var (
	_ tx.Stager         = (*consumer)(nil)
	_ queue.Notifier    = (*consumer)(nil)
	_ queue.GenNotifier = (*consumer)(nil)
)

// Ready implements queue.Notifier: the channel is closed when a producer
// transaction that wrote to the queue has committed (after its commit
// returned, so a transaction started after the wake-up sees the entries), or
// when something else may give this consumer entries or an error: another
// consumer released partitions it left unread or that a consumer skipped
// (leased), a lease's transaction ended without releasing it, a rescale, a
// truncate, the group or queue removed, the backend closed. Wake-ups are
// in-process and per queue (a consumer may wake to find the new entries in
// another instance's partitions).
func (c *consumer) Ready() <-chan struct{} { return c.q.ready() }

// Gen implements queue.GenNotifier: the queue's count of wake-ups (an
// atomic load, no lock).
func (c *consumer) Gen() uint64 { return c.q.gen.Load() }

// ReadyAt implements queue.GenNotifier.
func (c *consumer) ReadyAt(gen uint64) <-chan struct{} { return c.q.readyAt(gen) }

// Consumer implements queue.Backend.
func (b *Backend) Consumer(name, group string, instance int) (queue.ConsumerDriver, error) {
	q, err := b.queue(name)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	g := q.groups[group]
	if g == nil {
		return nil, fmt.Errorf("%w: %q of queue %q", queue.ErrUnknownGroup, group, name)
	}
	if instance < 0 || instance >= g.meta.Instances {
		return nil, fmt.Errorf("%w: %d of group %q (%d instances)", queue.ErrUnknownInstance, instance, group, g.meta.Instances)
	}
	return &consumer{b: b, q: q, g: g, instance: instance, work: map[int]*work{}}, nil
}

// StartTx implements tx.Participant. A consumer is one transaction's at a
// time: handed t while the transaction it was handed before has not ended
// here (no PostCommit, no Rollback yet), it refuses t with queue.ErrInUse
// if that one is still in progress in t's snapshot (another Context uses
// the consumer); if it ended there, its Context was given up (lost, timed
// out, gone after its commit) and t takes its place (endUnfinished). The
// refused Context's Rollback, which its Start runs at once, leaves the
// open transaction alone. Cost when the previous transaction ended here:
// one compare-and-swap.
func (c *consumer) StartTx(t *tx.Tx) error {
	if !c.open.CompareAndSwap(0, t.ID) {
		if err := c.takeUnfinished(t); err != nil {
			c.refused.Add(1)
			return err
		}
	}
	c.releaseAll(false)
	c.t = t
	return nil
}

// takeUnfinished is StartTx(t) on a consumer whose previous transaction
// had not ended here when StartTx looked.
func (c *consumer) takeUnfinished(t *tx.Tx) error {
	if prev := c.open.Load(); prev != 0 && !endedIn(t, prev) {
		return fmt.Errorf("%w: consumer %d of %s/%s handed tx %d while its tx %d is in progress (one consumer in two Contexts?)",
			queue.ErrInUse, c.instance, c.q.name, c.g.meta.Name, t.ID, prev)
	}
	if c.t != nil {
		if err := c.endUnfinished(t); err != nil {
			return err
		}
	}
	c.open.Store(t.ID)
	return nil
}

// endUnfinished is for a consumer handed t while its previous transaction,
// ended in t's snapshot, never ended here (no PostCommit, no Rollback:
// given up, its goroutine lost, its Context gone after the commit). One
// that staged or persisted may have committed: the partitions it holds
// take their committed state from the store at once (adoptLocked), else
// the consumer's next transaction read from the state before that commit
// and delivered its entries again (PostCommitNeverRun/*/same_consumer).
func (c *consumer) endUnfinished(t *tx.Tx) error {
	prev := c.t
	if c.wrote.Load() != prev.ID {
		c.abandonPersisted()
		return nil
	}
	c.q.mu.Lock()
	var err error
	wake := false
	for p, w := range c.work {
		s := w.slot
		if s.owner != c || err != nil {
			continue
		}
		if _, err = c.adoptLocked(p, s, t, false); err == nil && s.skipped {
			// Released here: a consumer that skipped it may wait.
			s.skipped = false
			wake = wake || c.q.index[p].mayHaveWork(&s.committed.st, nil)
		}
	}
	c.q.mu.Unlock()
	if wake {
		c.q.notify()
	}
	if err != nil {
		return err
	}
	if c.persisted {
		// The slots hold what of its Persist stays stored (adoptLocked).
		c.b.endPersist(prev.WritePointer)
		c.persisted = false
	}
	return nil
}

// endedIn reports whether transaction id had ended when t started.
func endedIn(t *tx.Tx, id uint64) bool {
	if id > t.ReadPointer() {
		return false // began after t's snapshot, or was in progress at it
	}
	_, inProgress := slices.BinarySearch(t.InProgress(), id)
	return !inProgress
}

// abandonPersisted is for a consumer handed a new transaction while the
// previous one had persisted and never ended here (given up, its goroutine
// lost). The versions it wrote stay stored until each slot is written
// again: the slots hold pruning at its pointer, as for one found at Open,
// and its registration ends (it held the prune bound for good:
// TestReusedConsumerEndsLostPersist).
func (c *consumer) abandonPersisted() {
	if !c.persisted {
		return
	}
	c.q.mu.Lock()
	for _, w := range c.work {
		if w.changed {
			w.slot.holdAt(c.t.WritePointer)
		}
	}
	c.q.mu.Unlock()
	c.b.endPersist(c.t.WritePointer)
	c.persisted = false
}

func (c *consumer) UpdateTx(t *tx.Tx) error { c.t = t; return nil }

// candidates lists the partitions this instance may read now, under q.mu.
func (c *consumer) candidatesLocked() ([]int, error) {
	q, g := c.q, c.g
	if q.deleted {
		return nil, fmt.Errorf("%w: %q", queue.ErrUnknownQueue, q.name)
	}
	if q.groups[g.meta.Name] != g {
		return nil, fmt.Errorf("%w: %q of queue %q", queue.ErrUnknownGroup, g.meta.Name, q.name)
	}
	n := g.meta.Instances
	if c.instance >= n {
		return nil, fmt.Errorf("%w: %d of group %q (now %d instances)", queue.ErrUnknownInstance, c.instance, g.meta.Name, n)
	}
	P := q.cfg.Partitions
	var parts []int
	if g.meta.Strategy == queue.FIFO {
		start := int(g.fifo.Add(1)) % P
		for i := range P {
			parts = append(parts, (start+i)%P)
		}
	} else {
		for p := c.instance; p < P; p += n {
			parts = append(parts, p)
		}
	}
	return parts, nil
}

// leaseLocked takes partition p for the current transaction unless another
// consumer's transaction holds it (the previous owner, during a rescale) or
// the partition index shows nothing to read there (then it returns nil
// without leasing: skipping an idle partition costs no Badger access).
// A lease whose transaction ended before it wrote (timed out, its
// goroutine lost) is taken over; one that ended after it wrote, with the
// state the store holds (adoptLocked: a commit its PostCommit has not
// published, only Options.PostCommitWait after it was first found so).
func (c *consumer) leaseLocked(p int) (*work, error) {
	if w := c.work[p]; w != nil {
		if !c.q.index[p].mayHaveWork(&w.st, c.t) {
			return nil, nil
		}
		return w, nil
	}
	s := c.g.slots[p]
	if s.owner != nil {
		switch leaseEndLocked(s, endedIn(c.t, s.ownerTx)) {
		case leaseHeld:
			// The release wakes us (the owner may not come back for what
			// it left), and so does the background loop if its tx ends
			// without one.
			s.skipped = true
			c.q.leaseWait.Store(true)
			return nil, nil
		case leaseEndedWrote:
			taken, err := c.adoptLocked(p, s, c.t, true)
			if err != nil {
				return nil, err
			}
			if !taken { // committed: its PostCommit may still come
				s.skipped = true
				c.q.leaseWait.Store(true)
				return nil, nil
			}
		}
	}
	s.resolve(c.t)
	if !c.q.index[p].mayHaveWork(&s.committed.st, c.t) {
		return nil, nil
	}
	s.owner, s.ownerTx, s.unpublished = c, c.t.ID, time.Time{}
	w := &work{slot: s, prev: s.committed, st: s.committed.st.clone()}
	c.work[p] = w
	return w, nil
}

// leaseEnd says whether a lease can be taken over (leaseEndLocked).
type leaseEnd uint8

const (
	leaseHeld       leaseEnd = iota // its transaction may still change the slot
	leaseEnded                      // ended before it wrote: the state in memory is the slot's
	leaseEndedWrote                 // ended after it wrote: the store has the slot's state
)

// leaseEndLocked tells whether the lease of s can be taken over, given
// whether its transaction had ended when the taker's started (ended).
//
// One that never staged, persisted nor began its rollback did not commit
// and never will (an ended transaction cannot), so the committed state in
// memory is the slot's: leaseEnded. One that staged or persisted and went
// no further (its PostCommit or Rollback has not begun: lost after its
// writes) either committed, with its PostCommit (which publishes the new
// state and releases the lease) not run — maybe never — or was ended by the
// coordinator (timed out) and never will commit (on the general path its
// persisted version stays invisible): leaseEndedWrote, the store says which
// (adoptLocked). Before, such a lease was held until a restart. A
// transaction still staging or persisting, or rolling back (which may keep
// its moves of the state it leased), ends the lease itself: leaseHeld. A
// dead transaction's later Dequeue, Rollback, PostCommit and release leave
// a taken-over slot alone (they check the owner), and its Persist refuses
// to write one (checkLeasesLocked). Under q.mu.
func leaseEndLocked(s *slot, ended bool) leaseEnd {
	if !ended || s.ownerTx == evictingTx {
		return leaseHeld
	}
	o, id := s.owner, s.ownerTx
	switch {
	case o.ending.Load() != id:
		return leaseEnded
	case o.wrote.Load() == id:
		return leaseEndedWrote
	}
	return leaseHeld
}

// adoptLocked takes over the lease of slot s of partition p, whose
// transaction ended after it wrote (leaseEndedWrote), for t, with the
// committed state the store holds; it reports false if it must wait.
//
// The newest stored version t sees is the slot's. At the pointer of the
// one in memory, the owner did not commit (timed out after its writes): the
// one in memory is kept (it may have moved on from the stored one: an
// aborted empty step's moves) and the lease is taken over at once. At
// another pointer, it is the owner's commit, which its PostCommit has not
// published (every other commit of the slot was published before its lease
// ended; pointers do not tell which is newer: a transaction that started
// first may lease the slot after another one committed it,
// TestAdoptCommitOfOlderPointer). A patient taker then waits
// Options.PostCommitWait from when one first found it so, for a
// PostCommit merely slow to come (taken over in between, a later
// transaction's PostCommit on the partition came before it); a consumer
// given its own lost transaction's place does not (endUnfinished). A
// version t does not see (persisted by a transaction ended without
// committing) stays stored until the slot is written again: the slot holds
// pruning at it. Under q.mu; reads one key.
func (c *consumer) adoptLocked(p int, s *slot, t *tx.Tx, patient bool) (bool, error) {
	var vs []stateVersion
	err := c.b.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(stateKey(c.q.id, c.g.meta.ID, uint16(p)))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			vs, err = decodeStateValue(v)
			return err
		})
	})
	if err != nil {
		return false, fmt.Errorf("badgerq: consumer of %s/%s: state of partition %d, whose transaction %d ended after it wrote: %w",
			c.q.name, c.g.meta.Name, p, s.ownerTx, err)
	}
	s.resolve(t)
	seen := newestVisible(vs, t)
	if seen < len(vs) && vs[seen].wp != s.committed.wp {
		if patient {
			if s.unpublished.IsZero() {
				s.unpublished = c.now
			}
			if c.now.Sub(s.unpublished) < c.b.opts.PostCommitWait {
				return false, nil
			}
		}
		s.committed = vs[seen]
	}
	for _, v := range vs[:seen] {
		s.holdAt(v.wp)
	}
	s.owner, s.unpublished = nil, time.Time{}
	return true, nil
}

// Dequeue implements queue.ConsumerDriver. The entries are gathered in a
// slice the consumer keeps and returned in an exact-size copy: growing a
// slice of entries by appending allocated about twice what it returned.
func (c *consumer) Dequeue(max int) ([]queue.Entry, error) {
	out, err := c.DequeueAppend(c.scratch[:0], max)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	res := slices.Clone(out)
	clear(out) // the payloads are the caller's: keep no references
	c.scratch = out[:0]
	return res, nil
}

// DequeueAppend implements queue.DequeueAppender: Dequeue into dst.
func (c *consumer) DequeueAppend(dst []queue.Entry, max int) ([]queue.Entry, error) {
	if c.t == nil {
		return dst, queue.ErrNoTx
	}
	if c.b.shut.Load() {
		// Woken by Close (Ready): an error, not an empty read to wait on
		// again for a wake-up that never comes.
		return dst, queue.ErrClosed
	}
	if max < 0 {
		// An empty read looked like an idle queue: the caller waited
		// for entries that were there.
		return dst, fmt.Errorf("%w: dequeue of %d entries", queue.ErrBadConfig, max)
	}
	if max == 0 {
		return dst, nil
	}
	// An entry holds at most MaxUint32 events and readRun counts what is
	// left in uint32: a max of 1<<32 truncated to 0 (nothing delivered, ever),
	// and adding len(dst) to MaxInt overflowed.
	max = min(max, math.MaxInt32)
	max += len(dst) // below, max bounds len(out)
	c.q.mu.Lock()
	parts, err := c.candidatesLocked()
	c.q.mu.Unlock()
	if err != nil {
		return dst, err
	}
	c.now = c.b.opts.Now()
	// Opened at the first partition worth reading, again at a partition
	// leased after a TTL pass expired entries in slots it held (expiries):
	// the pass may have held this one, and its deletes are not in a read
	// opened before them (TestTTLEvictionBetweenPartitionsOfOneRead).
	var txn *badger.Txn
	var expiries uint64
	defer func() {
		if txn != nil {
			txn.Discard()
		}
	}()
	out := dst
	for _, p := range parts {
		if len(out) >= max {
			break
		}
		c.q.mu.Lock()
		_, had := c.work[p]
		w, err := c.leaseLocked(p)
		c.q.mu.Unlock()
		if err != nil {
			clear(out[len(dst):])
			return dst, err
		}
		if w == nil {
			continue
		}
		if txn != nil && !had && c.q.expiries.Load() != expiries {
			txn.Discard()
			txn = nil
		}
		if txn == nil {
			expiries = c.q.expiries.Load()
			txn = c.b.db.NewTransaction(false)
		}
		if leasedTestHook != nil {
			leasedTestHook(p)
		}
		if out, err = c.readPartition(txn, p, w, max, out); err != nil {
			clear(out[len(dst):])
			return dst, err
		}
		if !had && !w.changed {
			c.q.mu.Lock()
			wake := c.releaseLocked(p, w.slot)
			delete(c.work, p)
			c.q.mu.Unlock()
			if wake {
				c.q.notify()
			}
		}
	}
	if len(out) >= max {
		c.full = true
	}
	return out, nil
}

// leasedTestHook, if set, runs in Dequeue after each partition it leased or
// holds, before reading it, its read open (tests: to take the lease over
// there, or to run an eviction pass).
var leasedTestHook func(p int)

// readPartition appends up to max-len(out) entries of partition p, highest
// priority level first.
//
// Each level gets its own iterator bounded by the level's prefix: Badger's
// iterator skips deleted keys until it finds a live one or leaves its
// prefix, so an iterator over the whole queue would walk, at the end of
// every level, over the tombstones of everything evicted after it.
func (c *consumer) readPartition(txn *badger.Txn, p int, w *work, max int, out []queue.Entry) ([]queue.Entry, error) {
	c.idx = c.q.index[p].snapshot(c.idx[:0])
	c.prios = levelsToRead(c.prios[:0], c.idx, &w.st)
	for _, prio := range c.prios {
		if len(out) >= max {
			break
		}
		if !levelMayHaveWork(c.idx, prio, w.st.find(prio), c.t) {
			continue
		}
		ls := w.st.level(prio)
		lp := levelPrefix(c.q.id, uint16(p), prio)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: lp})
		var err error
		out, err = c.readLevel(it, lp, p, prio, w, ls, max, out)
		it.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readLevel reads one priority level: holes first, then from the position.
func (c *consumer) readLevel(it *badger.Iterator, lp []byte, p int, prio uint8, w *work, ls *levelState, max int, out []queue.Entry) ([]queue.Entry, error) {
	t := c.t
	var err error
	// Holes first: they are older than anything at the scan position.
	for i := 0; i < len(ls.holes) && len(out) < max; {
		h := &ls.holes[i]
		switch {
		case t.Owns(h.wp):
			// The transaction's own enqueues into this queue land when it
			// commits: keep the hole for a later transaction.
			i++
			continue
		case t.Visible(h.wp):
			var done bool
			out, done, err = c.readRun(it, lp, p, prio, w, h, h.wp, h.wp, max, out)
			if err != nil {
				return nil, err
			}
			if !done {
				i++
				continue
			}
			if h.wp == ls.pos.wp && ls.pos.less(*h) {
				// The position is inside the pointer: the scan passed
				// the part of it that had landed (a Persist lands in
				// several Badger transactions when it is large). The
				// hole was read to the pointer's end: from the position
				// on, the scan read that part again
				// (TestPartialPersistReadOnce).
				ls.pos = *h
			}
		case h.wp < t.FirstInProgress():
			// invalid: never visible, nothing to read
		default:
			i++
			continue
		}
		ls.holes = slices.Delete(ls.holes, i, i+1)
		w.changed = true
	}
	if len(out) >= max {
		return out, nil
	}
	old := ls.pos
	var end bool
	out, end, err = c.readRun(it, lp, p, prio, w, &ls.pos, 0, t.ReadPointer(), max, out)
	if err != nil {
		return nil, err
	}
	// Every in-progress pointer the scan passed (it delivered a newer entry)
	// may still commit behind the position: a hole. At the pointer the scan
	// started in, the hole starts where the scan did: a transaction with a
	// newer snapshot (another FIFO instance, a rescale's old owner) may have
	// committed this state after reading part or all of that pointer's
	// events, which this older snapshot still sees in progress; a hole from
	// the pointer's start delivered them again.
	for _, ip := range t.InProgress() {
		if ip >= old.wp && ip < ls.pos.wp {
			addHoleAt(ls, holeFrom(old, ip))
			w.changed = true
		}
	}
	if end {
		// Nothing more t may see: move up to the first pointer still in
		// progress (or past the read pointer), passing only settled
		// pointers, so that the jump makes no holes and the partition index
		// can tell the level is done.
		target := t.ReadPointer() + 1
		for _, ip := range t.InProgress() {
			if ip >= ls.pos.wp {
				target = min(target, ip)
				break
			}
		}
		if target > ls.pos.wp {
			ls.pos = position{wp: target}
			w.changed = true
		}
	}
	return out, nil
}

// holeFrom is where a hole for pointer wp starts when the scan passed it
// from position from: from itself if it lies inside wp (what lies before it
// is consumed), else wp's start.
func holeFrom(from position, wp uint64) position {
	if from.wp == wp {
		return from
	}
	return position{wp: wp}
}

// addHoleAt adds a hole at h unless the level has one for h.wp already.
func addHoleAt(ls *levelState, h position) {
	wp := h.wp
	i, found := slices.BinarySearchFunc(ls.holes, wp, func(h position, wp uint64) int {
		switch {
		case h.wp < wp:
			return -1
		case h.wp > wp:
			return 1
		}
		return 0
	})
	if !found {
		ls.holes = slices.Insert(ls.holes, i, h)
	}
}

// readRun reads the entries of one level from *pos on, delivering visible
// ones and moving *pos past everything it settles. With only != 0 it reads
// just that producer pointer (a hole). It stops when out is full (end false)
// or past maxWP / the level's end (end true).
func (c *consumer) readRun(it *badger.Iterator, lp []byte, p int, prio uint8, w *work, pos *position, only, maxWP uint64, max int, out []queue.Entry) ([]queue.Entry, bool, error) {
	t := c.t
	ttl := c.q.cfg.TTL
	seek := entrySeek(c.q.id, uint16(p), prio, pos.wp, pos.chunk)
	for it.Seek(seek); it.ValidForPrefix(lp); it.Next() {
		item := it.Item()
		k, ok := decodeEntryKey(item.Key())
		if !ok {
			continue
		}
		if (only != 0 && k.wp != only) || k.wp > maxWP {
			return out, true, nil
		}
		start := uint32(0)
		if k.wp == pos.wp && k.chunk == pos.chunk {
			start = pos.idx
		}
		after := position{wp: k.wp, chunk: k.chunk + 1}
		if !t.Visible(k.wp) || t.Owns(k.wp) {
			if k.wp >= t.FirstInProgress() || t.Owns(k.wp) {
				// In progress, data already persisted (general path): a
				// hole, from where the scan is if it is inside k.wp (see
				// holeFrom).
				addHoleAt(w.st.level(prio), holeFrom(*pos, k.wp))
			}
			*pos = after
			w.changed = true
			continue
		}
		if start >= k.count {
			*pos = after
			continue
		}
		if ttl > 0 && c.now.Sub(time.UnixMilli(k.ms)) > ttl {
			n := uint64(k.count - start)
			w.st.expired += n
			w.expired += n
			*pos = after
			w.changed = true
			continue
		}
		if len(out) >= max {
			return out, false, nil
		}
		n := min(k.count-start, uint32(max-len(out)))
		val, err := copyEvents(item, start, n)
		if err != nil {
			return out, false, fmt.Errorf("badgerq: entry %d/%d/%d.%d: %w", p, prio, k.wp, k.chunk, err)
		}
		r, err := newEventReader(val)
		if err != nil {
			return out, false, err
		}
		enq := time.UnixMilli(k.ms)
		out = slices.Grow(out, int(n))
		idx := start
		for ; idx < start+n; idx++ {
			var ev queue.Event
			if err := r.next(&ev); err != nil {
				return out, false, fmt.Errorf("badgerq: entry %d/%d/%d.%d: %w", p, prio, k.wp, k.chunk, err)
			}
			ev.Priority = prio
			out = append(out, queue.Entry{ID: queue.EntryID{Partition: p, Priority: prio, Pointer: k.wp, Chunk: k.chunk, Index: idx}, Event: ev, Enqueued: enq})
		}
		w.delivered += uint64(n)
		w.st.consumed += uint64(n)
		w.changed = true
		if idx < k.count {
			*pos = position{wp: k.wp, chunk: k.chunk, idx: idx}
			return out, false, nil
		}
		*pos = after
	}
	return out, true, nil
}

// copyEvents copies events [start, start+n) of a packed value out of Badger
// into a packed value of their own (the delivered entries' payloads and keys
// alias it). Only those events are copied: a Dequeue that stops inside a
// 256 KiB chunk, and the next one that continues there, each copy their part
// instead of the whole value.
func copyEvents(item *badger.Item, start, n uint32) ([]byte, error) {
	var val []byte
	err := item.Value(func(v []byte) error {
		r, err := newEventReader(v)
		if err != nil {
			return err
		}
		for range start {
			if err := r.skip(); err != nil {
				return err
			}
		}
		from := len(v) - len(r.b)
		for range n {
			if err := r.skip(); err != nil {
				return err
			}
		}
		to := len(v) - len(r.b)
		val = make([]byte, 1+to-from)
		val[0] = valueVersion
		copy(val[1:], v[from:to])
		return nil
	})
	return val, err
}

// ChangeKeys reports nothing. Leases already serialize the transactions of
// one partition within the process that owns the DB, and a transaction that
// takes over a partition right after another committed it reads that commit's
// state: reporting the state keys would only turn every handoff into a
// spurious write conflict.
func (c *consumer) ChangeKeys() [][]byte { return nil }

// Store implements tx.Stager.
func (c *consumer) Store() any { return c.b.db }

// Stage implements tx.Stager: the new cursor states commit with the step.
// Marked ending first: a taker that sees this transaction ended after its
// commit (which follows) must wait for its PostCommit.
func (c *consumer) Stage(dst []tx.Write) ([]tx.Write, error) {
	if c.t == nil {
		return dst, c.noTx("Stage")
	}
	c.ending.Store(c.t.ID)
	for p, w := range c.work {
		if w.changed {
			dst = append(dst, tx.Write{
				Key:   stateKey(c.q.id, c.g.meta.ID, uint16(p)),
				Value: encodeStateValue(stateVersion{wp: c.t.WritePointer, st: w.st}),
			})
		}
	}
	c.wrote.Store(c.t.ID)
	return dst, nil
}

// noTx is the error of a Stage or Persist without a transaction: a
// participant never started, or one whose transaction a call of another
// Context ended (a late Finish of a Context given up, whose consumer went on
// in a new one: its Rollback rolled the new transaction back). Writing
// nothing and no error committed the new transaction without the cursor
// moves of the entries it had delivered, which then came again.
func (c *consumer) noTx(call string) error {
	return fmt.Errorf("%w: %s of consumer %d of %s/%s (its transaction never started, or a call of another Context ended it)",
		queue.ErrNoTx, call, c.instance, c.q.name, c.g.meta.Name)
}

// Persist (general path) writes the new state next to the committed one.
func (c *consumer) Persist() error {
	if c.t == nil {
		return c.noTx("Persist")
	}
	c.q.mu.Lock()
	err := c.checkLeasesLocked()
	c.q.mu.Unlock()
	if err != nil {
		return err
	}
	changed := false
	for _, w := range c.work {
		changed = changed || w.changed
	}
	if !changed {
		c.wrote.Store(c.t.ID)
		return nil
	}
	if err := c.b.beginPersist(c.t.WritePointer); err != nil {
		return err
	}
	c.persisted = true
	wb := c.b.db.NewWriteBatch()
	defer wb.Cancel()
	for p, w := range c.work {
		if w.changed {
			v := encodeStateValue(stateVersion{wp: c.t.WritePointer, st: w.st}, w.prev)
			if err := wb.Set(stateKey(c.q.id, c.g.meta.ID, uint16(p)), v); err != nil {
				return err
			}
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	if err := c.b.sync(); err != nil {
		return err
	}
	c.wrote.Store(c.t.ID)
	return nil
}

// checkLeasesLocked marks the transaction ending, so that its leases are
// no longer taken over, unless one was already: the transaction timed out
// and another took the partition, whose state it must not overwrite.
// Under q.mu.
func (c *consumer) checkLeasesLocked() error {
	for p, w := range c.work {
		if w.slot.owner != c {
			return fmt.Errorf("badgerq: consumer of %s/%s: partition %d was taken over, tx %d timed out: %w",
				c.q.name, c.g.meta.Name, p, c.t.ID, tx.ErrNotInProgress)
		}
	}
	c.ending.Store(c.t.ID)
	return nil
}

func (c *consumer) PostCommit() {
	// Only after this transaction's Stage or Persist (which set wrote):
	// else it is no commit of the consumer's transaction — a call of a
	// Context given up, whose consumer went on in a new transaction (it
	// published that one's reads as committed, and if it then aborted they
	// never came again: TestLatePostCommitOfGivenUpContext), or a misused
	// participant.
	if c.t == nil || c.wrote.Load() != c.t.ID {
		return
	}
	q := c.q
	q.mu.Lock()
	c.wrote.Store(0) // publishing: its leases are its own to end
	wrote := false
	for _, w := range c.work {
		// A slot taken over (its PostCommit came late) took this
		// commit's state from the store, and a taker may have committed
		// past it since (adoptLocked).
		if w.changed && w.slot.owner == c {
			w.slot.committed = stateVersion{wp: c.t.WritePointer, st: w.st}
			w.slot.hold = 0 // the stored value is this commit's: [new, committed prev]
			wrote = true
		}
	}
	// Its states landed after the queue was deleted or the group removed
	// (whose sweep ran under q.mu's order before this, or sees them):
	// delete them, else Open does.
	dead, removed := q.deleted, q.groups[c.g.meta.Name] != c.g
	q.mu.Unlock()
	if wrote && dead {
		_ = c.b.dropQueueKeys(q.id)
	} else if wrote && removed {
		_, _, _ = c.b.deletePrefix(stateGroupPrefix(q.id, c.g.meta.ID))
	}
	if c.persisted {
		c.b.endPersist(c.t.WritePointer)
	}
	c.persisted = false
	c.releaseAll(false)
	c.t = nil
	c.open.Store(0)
}

// Rollback restores the committed states it overwrote (general path) and
// gives the partitions back; the same entries will be read again.
//
// A partition where the transaction delivered and expired nothing changed
// only by facts that hold whatever the transaction's fate: positions moved
// over settled pointers, holes found empty or invalid. Those changes are kept
// (the next commit there makes them durable), so that a consumer that aborts
// its empty steps does not re-read the same partitions forever. They are
// kept in memory only, unless the slot's stored value must be written anyway:
// after a Persist (restored), or while it holds a version that never
// committed (slot.hold). The committed state in memory must not move past
// such a version's pointer while it is stored: the prune bound would pass it
// and the version count as committed after a restart (prune.go).
func (c *consumer) Rollback() error {
	for n := c.refused.Load(); n > 0; n = c.refused.Load() {
		if c.refused.CompareAndSwap(n, n-1) {
			return nil // the abort of a refused StartTx: not the open one's
		}
	}
	ws := c.rolled[:0]
	write := c.persisted
	c.q.mu.Lock()
	if c.t != nil {
		// From here its leases are not taken over: the moves kept below
		// are of the state it leased, which a taker's commit moves on.
		c.ending.Store(c.t.ID)
		c.wrote.CompareAndSwap(c.t.ID, 0)
	}
	for p, w := range c.work {
		// A slot taken over is the taker's: its state, whether in memory
		// or stored, is none of this transaction's business any more
		// (after a takeover of a persisted lease, restoring the version
		// before it wrote over what the taker committed).
		if w.changed && w.slot.owner == c {
			k := rolledWork{p: p, w: w, keep: w.delivered == 0 && w.expired == 0, hold: w.slot.hold != 0}
			ws = append(ws, k)
			write = write || (k.keep && k.hold)
		}
	}
	c.q.mu.Unlock()
	if rollbackTestHook != nil {
		rollbackTestHook()
	}
	defer func() { clear(ws); c.rolled = ws[:0] }()
	var err error
	wrote := false
	if len(ws) > 0 && write {
		wb := c.b.db.NewWriteBatch()
		for _, k := range ws {
			var v []byte
			switch {
			case k.keep && (c.persisted || k.hold):
				v = encodeStateValue(stateVersion{wp: k.w.prev.wp, st: k.w.st})
			case c.persisted:
				v = encodeStateValue(k.w.prev)
			default:
				continue
			}
			if e := wb.Set(stateKey(c.q.id, c.g.meta.ID, uint16(k.p)), v); e != nil && err == nil {
				err = e
			}
		}
		if e := wb.Flush(); e != nil && err == nil {
			err = e
		}
		wrote = true
	}
	c.q.mu.Lock()
	for _, k := range ws {
		s := k.w.slot
		written := wrote && err == nil && (c.persisted || (k.keep && k.hold))
		switch {
		case written:
			s.hold = 0 // the stored value is one committed version now
		case wrote && err != nil && c.persisted:
			s.holdAt(c.t.WritePointer) // the new version may still be stored
		}
		if k.keep && (written || (!c.persisted && s.hold == 0)) {
			s.committed = stateVersion{wp: k.w.prev.wp, st: k.w.st}
		}
	}
	dead, removed := c.q.deleted, c.q.groups[c.g.meta.Name] != c.g
	c.q.mu.Unlock()
	// The restored states landed after the queue was deleted or the group
	// removed, maybe after its sweep: sweep them, as PostCommit does (they
	// stayed until the next Open).
	if wrote && dead {
		_ = c.b.dropQueueKeys(c.q.id)
	} else if wrote && removed {
		_, _, _ = c.b.deletePrefix(stateGroupPrefix(c.q.id, c.g.meta.ID))
	}
	if c.persisted {
		c.b.endPersist(c.t.WritePointer) // a failed restore is held by the slots
		c.persisted = false
	}
	c.releaseAll(true)
	c.t = nil
	c.open.Store(0)
	return err
}

// rollbackTestHook, if set, runs in Rollback between its look at the
// leases and its changes to them (tests: to try a takeover there).
var rollbackTestHook func()

// releaseAll gives the leased partitions back. When the transaction left
// entries behind in them (a Dequeue stopped at max, or, with rolledBack,
// delivered entries go back), waiting consumers are woken.
func (c *consumer) releaseAll(rolledBack bool) {
	wake := c.full
	c.full = false
	if len(c.work) == 0 {
		return
	}
	c.q.mu.Lock()
	for p, w := range c.work {
		if c.releaseLocked(p, w.slot) {
			wake = true
		}
		if rolledBack && w.delivered > 0 {
			wake = true
		}
		delete(c.work, p)
	}
	c.q.mu.Unlock()
	if wake {
		c.q.notify()
	}
}

// releaseLocked ends c's lease of partition p's slot s, if c still holds it
// (else it was taken over: c's transaction had ended). It reports whether a
// consumer skipped s while it was leased and the partition still holds
// something past its committed state: that one may be waiting, and must be
// woken. Under q.mu.
func (c *consumer) releaseLocked(p int, s *slot) (wake bool) {
	if s.owner != c {
		return false
	}
	s.owner, s.unpublished = nil, time.Time{}
	if s.skipped {
		s.skipped = false
		// Any hole counts: c's snapshot may not see a producer the
		// skipper's next one does.
		wake = c.q.index[p].mayHaveWork(&s.committed.st, nil)
	}
	return wake
}
