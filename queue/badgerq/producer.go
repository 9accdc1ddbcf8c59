package badgerq

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
	"weak"

	"github.com/cespare/xxhash/v2"
	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// producer buffers a transaction's events per (partition, priority) and
// writes each run as one packed value keyed by the transaction's write
// pointer. It reports no change keys: producers never conflict.
type producer struct {
	b *Backend
	q *queueRT
	t *tx.Tx

	bufs  []*runBuf
	index map[uint32]int // part<<8 | prio → bufs index

	rrPart, rrLeft int   // keyless events: current partition and room left in it
	events, bytes  int64 // reserved against the depth limit
	persisted      [][]byte
	persistWP      uint64 // registered by Persist (prune.go); 0 if none

	// staged: the commit Stage staged, until PostCommit or Rollback (nil:
	// none). One whose outcome is unknown stays until the next StartTx
	// settles it (settleUnended).
	staged atomic.Pointer[stagedTx]

	// free holds chunk buffers of committed transactions for the next
	// ones (at most freeBytes of capacity): a chunk grown by appending from
	// empty to ChunkBytes allocates about twice its size, and every
	// transaction did that anew.
	free      [][]byte
	freeBytes int
}

type runBuf struct {
	part   uint16
	prio   uint8
	chunks []chunk
}

type chunk struct {
	val         []byte
	count, size uint32
}

var _ tx.Stager = (*producer)(nil)

// stagedTx is a producer's staged commit: its write pointer, and the events
// and bytes of its entries that eviction and truncation deleted before the
// producer settled it (under evictMu). A commit whose outcome is unknown
// (fast path: landed or not, all or nothing) is settled at the next
// StartTx, which counts what is stored as depth: entries a TTL pass or a
// truncate deleted first had left the depth and the limits' counter there,
// and were released from the counter again (both low;
// TestLogFailedProducerNewTxDepth, truncate and expire).
type stagedTx struct {
	wp                          uint64
	deletedEvents, deletedBytes int64
}

// Producer implements queue.Backend.
func (b *Backend) Producer(name string) (queue.ProducerDriver, error) {
	q, err := b.queue(name)
	if err != nil {
		return nil, err
	}
	p := &producer{b: b, q: q, index: map[uint32]int{}}
	q.prodMu.Lock()
	q.producers = slices.DeleteFunc(q.producers, func(w weak.Pointer[producer]) bool { return w.Value() == nil })
	q.producers = append(q.producers, weak.Make(p))
	q.prodMu.Unlock()
	return p, nil
}

// stagedTxs maps the write pointers of the producers' staged commits to
// them (nil if none).
func (q *queueRT) stagedTxs() map[uint64]*stagedTx {
	var m map[uint64]*stagedTx
	q.prodMu.Lock()
	defer q.prodMu.Unlock()
	for _, w := range q.producers {
		if p := w.Value(); p != nil {
			if s := p.staged.Load(); s != nil {
				if m == nil {
					m = map[uint64]*stagedTx{}
				}
				m[s.wp] = s
			}
		}
	}
	return m
}

func (p *producer) StartTx(t *tx.Tx) error {
	if p.t != nil {
		p.settleUnended()
	}
	// Persisted entries of a previous transaction keep their
	// registration: their fate is unknown (a commit whose log write
	// failed), so eviction and truncation keep them.
	p.persistWP = 0
	p.reset()
	p.t = t
	p.rrLeft = 0
	return nil
}

func (p *producer) UpdateTx(t *tx.Tx) error { p.t = t; return nil }

// settleUnended accounts for the previous transaction, which never ended
// here (no PostCommit, no Rollback): abandoned, or a commit whose outcome
// is unknown (tx.ErrLogFailed). What of it is stored is depth — on the
// fast path it landed with its commit record, so it committed; on the
// general path it was persisted and stays (registered) until a restart,
// whose recount counts it too — and the rest of its reservation is
// released. Releasing all of it left stored events in neither the depth
// nor the limits' counter (TestLogFailedProducerNewTxDepth).
//
// Under evictMu, with what eviction and truncation deleted of it since it
// was staged (stagedTx): those events left the depth and the limits'
// counter there, and count as landed here.
func (p *producer) settleUnended() {
	p.b.evictMu.Lock()
	ev, by := p.stored(p.t.WritePointer)
	if s := p.staged.Load(); s != nil && s.wp == p.t.WritePointer {
		ev += s.deletedEvents
		by += s.deletedBytes
	}
	p.staged.Store(nil)
	p.b.evictMu.Unlock()
	p.q.events.Add(ev)
	p.q.bytes.Add(by)
	p.q.release(p.events-ev, p.bytes-by)
	p.endHold()
}

// stored counts the events and bytes this producer's buffers have in the
// store under write pointer wp, from the keys (none if the read fails: the
// DB is closing, and Open recounts).
func (p *producer) stored(wp uint64) (events, bytes int64) {
	if len(p.bufs) == 0 || p.b.db.IsClosed() {
		return 0, 0
	}
	_ = p.b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		for _, rb := range p.bufs {
			lp := levelPrefix(p.q.id, rb.part, rb.prio)
			for it.Seek(entrySeek(p.q.id, rb.part, rb.prio, wp, 0)); it.ValidForPrefix(lp); it.Next() {
				k, ok := decodeEntryKey(it.Item().Key())
				if !ok || k.wp != wp {
					break
				}
				events += int64(k.count)
				bytes += int64(k.size)
			}
		}
		return nil
	})
	return events, bytes
}

func (p *producer) ChangeKeys() [][]byte { return nil }

// Enqueue buffers ev; it reaches the store when the transaction commits.
func (p *producer) Enqueue(ctx context.Context, ev queue.Event) error {
	if p.t == nil {
		return queue.ErrNoTx
	}
	q := p.q
	if p.b.shut.Load() {
		return queue.ErrClosed
	}
	if q.isDeleted() {
		return fmt.Errorf("%w: %q", queue.ErrUnknownQueue, q.name)
	}
	size := int64(ev.Size())
	if err := q.reserve(ctx, p.b, 1, size, p); err != nil {
		return err
	}
	p.events++
	p.bytes += size

	var part int
	if ev.Key != nil {
		part = int(xxhash.Sum64(ev.Key) % uint64(q.cfg.Partitions))
	} else {
		if p.rrLeft == 0 {
			p.rrPart = int(q.rr.Add(1)) % q.cfg.Partitions
			p.rrLeft = p.b.opts.SpreadRun
		}
		part = p.rrPart
		p.rrLeft--
	}
	bk := uint32(part)<<8 | uint32(ev.Priority)
	i, ok := p.index[bk]
	if !ok {
		i = len(p.bufs)
		p.index[bk] = i
		p.bufs = append(p.bufs, &runBuf{part: uint16(part), prio: ev.Priority})
	}
	rb := p.bufs[i]
	if n := len(rb.chunks); n == 0 || len(rb.chunks[n-1].val) >= p.b.opts.ChunkBytes {
		rb.chunks = append(rb.chunks, chunk{val: append(p.buffer(), valueVersion)})
	}
	c := &rb.chunks[len(rb.chunks)-1]
	c.val = appendEvent(c.val, &ev)
	c.count++
	c.size += uint32(size)
	return nil
}

// Store implements tx.Stager.
func (p *producer) Store() any { return p.b.db }

// Stage implements tx.Stager: the packed values go into the commit's atomic
// write. The partition index learns about them first, before the commit can
// become visible to any consumer.
func (p *producer) Stage(dst []tx.Write) ([]tx.Write, error) {
	if len(p.bufs) > 0 {
		p.staged.Store(&stagedTx{wp: p.t.WritePointer})
	}
	ms := p.b.opts.Now().UnixMilli()
	for _, rb := range p.bufs {
		p.q.index[rb.part].raise(rb.prio, p.t.WritePointer, uint32(len(rb.chunks)))
	}
	for _, rb := range p.bufs {
		for i, c := range rb.chunks {
			k := entryKey{qid: p.q.id, part: rb.part, prio: rb.prio, wp: p.t.WritePointer, chunk: uint32(i), count: c.count, size: c.size, ms: ms}
			dst = append(dst, tx.Write{Key: k.encode(make([]byte, 0, entryKeyLen)), Value: c.val})
		}
	}
	return dst, nil
}

// Persist writes the values directly (general path); Rollback deletes them.
// Consumers never deliver them before the transaction is visible.
func (p *producer) Persist() error {
	if len(p.bufs) == 0 {
		return nil
	}
	if err := p.b.beginPersist(p.t.WritePointer); err != nil {
		return err
	}
	p.persistWP = p.t.WritePointer
	writes, _ := p.Stage(nil)
	wb := p.b.db.NewWriteBatch()
	defer wb.Cancel()
	for _, w := range writes {
		p.persisted = append(p.persisted, w.Key)
		if err := wb.Set(w.Key, w.Value); err != nil {
			return err
		}
	}
	if err := wb.Flush(); err != nil {
		return err
	}
	return p.b.sync()
}

func (p *producer) PostCommit() {
	q := p.q
	p.staged.Store(nil)
	p.endPersist()
	// The reservation becomes depth: usedEvents and usedBytes stay.
	q.events.Add(p.events)
	q.bytes.Add(p.bytes)
	p.b.produced.Add(p.bytes)
	p.b.wakeWriteback()
	wrote := len(p.bufs) > 0
	p.endHold()
	p.recycle()
	p.reset()
	if wrote {
		if q.dead.Load() {
			// Deleted while in flight: the entries landed under a dead
			// queue id, maybe after DeleteQueue's sweep (it set dead
			// first, so either it saw them or this sees dead).
			_ = p.b.dropQueueKeys(q.id) // else Open drops them
		}
		// The commit is visible now: wake consumers waiting on Ready.
		q.notify()
	}
}

func (p *producer) Rollback() error {
	p.staged.Store(nil)
	var err error
	if len(p.persisted) > 0 {
		err = p.b.db.Update(func(txn *badger.Txn) error {
			for _, k := range p.persisted {
				if err := txn.Delete(k); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err == nil {
		p.endPersist()
	}
	// else the entries stay, under a pointer the context invalidates: the
	// registration keeps holding invalid-list pruning below it (prune.go).
	p.persistWP = 0
	p.q.release(p.events, p.bytes)
	p.endHold()
	p.reset()
	return err
}

// endHold: the transaction's reservation is depth now or released. In a
// queue with a limit, a producer waiting for room may now be the last
// holder still waiting (see deadlocked): waiters look again.
func (p *producer) endHold() {
	held := p.events > 0
	p.events, p.bytes = 0, 0
	if !held || !p.q.limited() {
		return
	}
	if p.q.holders.Add(-1); p.q.nWaiters.Load() > 0 {
		p.q.signalSpace()
	}
}

// endPersist ends the registration of what Persist wrote (prune.go).
func (p *producer) endPersist() {
	if p.persistWP != 0 {
		p.b.endPersist(p.persistWP)
		p.persistWP = 0
	}
}

func (p *producer) reset() {
	p.t = nil
	clear(p.bufs) // the runBufs and their chunks: recycled or dropped
	p.bufs = p.bufs[:0]
	clear(p.index)
	p.persisted = nil
}

// buffer returns an empty chunk buffer, a recycled one if there is one.
func (p *producer) buffer() []byte {
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.freeBytes -= cap(b)
		return b[:0]
	}
	return make([]byte, 0, 512)
}

// recycle keeps the chunk buffers of a committed transaction for the next
// ones. Only after the commit: until then the values are the commit's
// writes, and Badger holds them until its write returned (a commit whose
// outcome is unknown, or a rollback, drops them instead). The kept capacity
// is bounded by maxFreeBytes.
func (p *producer) recycle() {
	limit := p.maxFreeBytes()
	for _, rb := range p.bufs {
		for i := range rb.chunks {
			b := rb.chunks[i].val
			rb.chunks[i].val = nil
			if cap(b) > 2*p.b.opts.ChunkBytes || p.freeBytes+cap(b) > limit {
				continue
			}
			p.free = append(p.free, b)
			p.freeBytes += cap(b)
		}
	}
}

// maxFreeBytes bounds the recycled capacity of one producer: four full
// chunks (1 MiB by default), about what one step's keyless batch spread over
// partitions, or a keyed batch over 64 partitions, uses.
func (p *producer) maxFreeBytes() int { return 4 * p.b.opts.ChunkBytes }

func (q *queueRT) isDeleted() bool { return q.dead.Load() }

// reserveTestHook, if set, runs in reserve before each look at the room
// (tests: to act between a waiter's wake-up and its checks).
var reserveTestHook func()

func (q *queueRT) limited() bool { return q.cfg.MaxEvents > 0 || q.cfg.MaxBytes > 0 }

// roomWaiter is a producer waiting in reserve: the room its transaction
// holds, the room it asks for, and its age (transaction id: the higher the
// younger).
type roomWaiter struct {
	heldEvents, heldBytes int64
	events, bytes         int64
	age                   uint64
	woken                 bool // a wake-up to give up is on its way
}

// reserve counts n events of size bytes of producer p against the depth
// limit, waiting up to FullWait (and ctx) for eviction to make room.
//
// Room is reserved event by event, so producers of several events can each
// hold part of it and all wait for more that only their own ends would
// free; each waited out FullWait and failed. When every producer holding
// room waits for more and the room they hold leaves too little for any of
// them even once every committed event is evicted (deadlocked), the
// youngest gives up at once (HeldByWaiters); its abort frees its room for
// the older ones (TestConformance*/HoldersWaitForEachOther).
func (q *queueRT) reserve(ctx context.Context, b *Backend, n, size int64, p *producer) error {
	cfg := &q.cfg
	if !q.limited() {
		q.usedEvents.Add(n)
		q.usedBytes.Add(size)
		return nil
	}
	if err := queue.CheckFits(q.name, int(size), cfg.MaxBytes); err != nil {
		return err // no wait for room that never comes
	}
	var deadline <-chan time.Time
	var w *roomWaiter // registered in q.waiters while this waits
	defer func() {
		if w != nil {
			q.spaceMu.Lock()
			q.waiters = slices.DeleteFunc(q.waiters, func(x *roomWaiter) bool { return x == w })
			q.nWaiters.Add(-1)
			q.spaceMu.Unlock()
		}
	}()
	for {
		if reserveTestHook != nil {
			reserveTestHook()
		}
		q.spaceMu.Lock()
		// Checked at every wake-up: Close and DeleteQueue signal space, and
		// neither makes room (a waiter slept out FullWait before). Under
		// spaceMu, with the channel taken below: Close and DeleteQueue set
		// their flag before signalSpace takes spaceMu, so either this sees
		// it or it waits on the channel they close (checked before the
		// lock, a flag set and signalled in between left the waiter on the
		// new channel for all of FullWait).
		if b.shut.Load() {
			q.spaceMu.Unlock()
			return queue.ErrClosed
		}
		if q.isDeleted() {
			q.spaceMu.Unlock()
			return fmt.Errorf("%w: %q", queue.ErrUnknownQueue, q.name)
		}
		ev, by := q.depth()
		if q.fits(ev, by, n, size) {
			q.usedEvents.Add(n)
			q.usedBytes.Add(size)
			if p.events == 0 {
				q.holders.Add(1)
			}
			q.spaceMu.Unlock()
			return nil
		}
		full := &queue.FullError{Queue: q.name, Events: ev, Bytes: by, MaxEvents: cfg.MaxEvents, Max: cfg.MaxBytes}
		if cfg.FullWait == 0 {
			q.spaceMu.Unlock()
			return full
		}
		if w == nil {
			w = &roomWaiter{heldEvents: p.events, heldBytes: p.bytes, events: n, bytes: size, age: p.t.ID}
			q.waiters = append(q.waiters, w)
			q.nWaiters.Add(1)
		}
		w.woken = false
		if y := q.deadlocked(); y == w {
			q.spaceMu.Unlock()
			full.HeldByWaiters = true
			return full
		} else if y != nil && !y.woken {
			y.woken = true // to give up; the others wait on the next channel
			q.wakeLocked()
		}
		wait := q.space
		q.spaceMu.Unlock()
		if deadline == nil {
			t := time.NewTimer(cfg.FullWait)
			defer t.Stop()
			deadline = t.C
		}
		b.Kick()
		select {
		case <-wait:
		case <-deadline:
			return full
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", full, ctx.Err())
		}
	}
}

// fits reports whether n events of size bytes fit at depth ev, by.
func (q *queueRT) fits(ev, by, n, size int64) bool {
	return (q.cfg.MaxEvents == 0 || ev+n <= q.cfg.MaxEvents) && (q.cfg.MaxBytes == 0 || by+size <= q.cfg.MaxBytes)
}

// deadlocked returns the youngest waiter that holds room when every
// producer holding room here waits for more and what they hold leaves too
// little for any of them even with nothing committed left (eviction cannot
// help: only one of them ending can); else nil. Under spaceMu.
func (q *queueRT) deadlocked() *roomWaiter {
	var heldEvents, heldBytes int64
	var waiting int
	var youngest *roomWaiter
	for _, w := range q.waiters {
		if w.heldEvents > 0 {
			waiting++
			heldEvents += w.heldEvents
			heldBytes += w.heldBytes
			if youngest == nil || w.age >= youngest.age {
				youngest = w
			}
		}
	}
	if waiting == 0 || int64(waiting) < q.holders.Load() {
		return nil // a holder that is not waiting may end, a commit be evicted
	}
	for _, w := range q.waiters {
		if w.heldEvents > 0 && q.fits(heldEvents, heldBytes, w.events, w.bytes) {
			return nil // evicting committed events makes room for w
		}
	}
	return youngest
}

// depthTestHook, if set, runs in depth between its loads (tests: to commit
// a producer there).
var depthTestHook func()

// depth is the committed depth plus the reservations of producers in flight.
func (q *queueRT) depth() (events, bytes int64) {
	ev := q.usedEvents.Load()
	if depthTestHook != nil {
		depthTestHook()
	}
	return ev, q.usedBytes.Load()
}

// release drops the reservation of a producer that did not commit: that
// frees room at once.
func (q *queueRT) release(n, size int64) {
	if n == 0 {
		return
	}
	q.usedEvents.Add(-n)
	q.usedBytes.Add(-size)
	if q.cfg.MaxEvents > 0 || q.cfg.MaxBytes > 0 {
		q.signalSpace()
	}
}

// removeDepth takes evicted or truncated entries out of the depth (the
// events of a producer whose PostCommit has not run yet may be among them:
// events and bytes go below what they count for a moment, usedEvents and
// usedBytes do not, as those entries are in them since their reservation).
func (q *queueRT) removeDepth(n, size int64) {
	q.events.Add(-n)
	q.bytes.Add(-size)
	q.usedEvents.Add(-n)
	q.usedBytes.Add(-size)
}
