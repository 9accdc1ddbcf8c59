package badgerq

import (
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/tx"
)

// evict deletes, per partition and priority level, the entries below the
// smallest cursor of all groups (consumed by everyone), and with a TTL the
// expired entries at the front of the level. It works on keys only: the
// count, size and time it needs are in the key.
func (b *Backend) evict() error {
	b.evictMu.Lock()
	defer b.evictMu.Unlock()
	prune := ^uint64(0)
	for _, q := range b.queueList() {
		low, err := b.evictQueue(q)
		if err != nil {
			return err
		}
		prune = min(prune, low)
	}
	if b.pruneGated() {
		b.reportPrune(prune)
	}
	return nil
}

// evictQueue returns the lowest bound it kept data above: no data of any
// transaction below it remains in this queue (for invalid-list pruning).
//
// Levels come from the partition index, and each level is read with its own
// iterator from where the previous pass stopped (evictFrom), so a pass does
// not walk over the tombstones of earlier passes, which stay in the LSM
// until compaction drops them.
func (b *Backend) evictQueue(q *queueRT) (uint64, error) {
	now := b.opts.Now()
	ttl := q.cfg.TTL
	// General path: pointers whose entries are persisted, not committed
	// or rolled back (read with the read transaction, after now: see
	// readInFlight). Their entries are not in the depth: they are kept,
	// expired or consumed (an invalidated producer is settled for
	// consumers, which pass it), and deleted by their Rollback, or by a
	// later pass once they committed. Deleting them took them from the
	// depth, and their Rollback took them from the reservations again:
	// below zero (TestEvictInvalidatedInFlightDepth,
	// TestTTLEvictionInFlightDepth, TestEvictPersistBetweenReadsDepth).
	var inFlight map[uint64]int
	low := ^uint64(0)
	// The batch and the read transaction are made on first use, so an idle
	// queue's pass touches nothing in Badger: each transaction wakes Badger's
	// watermark goroutine twice, and an empty batch's Flush still runs its
	// callback on a goroutine of its own and waits for it.
	del := keyDeleter{b: b, q: q}
	var txn *badger.Txn
	// TTL: the pass holds the slots of the groups that have not read an
	// entry it expires (mayExpire), until its deletes landed or failed.
	ev := &consumer{b: b, q: q}
	var gated []int // partitions where it holds slots
	// A snapshot for mayExpire (which stored state version of a slot no
	// consumer resolved since Open committed; whether a lease's
	// transaction ended), taken once, the first time one of those is asked.
	var snap *tx.Tx
	snapped := false
	defer func() {
		if txn != nil {
			txn.Discard()
		}
		if snap != nil {
			b.opts.Coordinator.Abort(snap)
		}
		// What is gone leaves the depth, whether the pass ended well or not.
		if del.events > 0 {
			q.removeDepth(del.events, del.bytes)
			q.expired.Add(del.expired)
			b.freed.Add(del.bytes)
			q.signalSpace()
		}
		if len(gated) > 0 {
			q.expiries.Add(1) // before the slots go back: see expiries
		}
		q.endExpiry(ev, gated)
	}()
	// Where each level's next pass starts, applied once every delete
	// landed: a pass whose write failed leaves them, and the next one reads
	// those levels again (moved first, the entries a failed write left
	// were never deleted).
	var moves []evictMove

	// Every partition's cursors are taken before the read of the entries
	// opens: an entry they passed had committed before, so the read sees
	// it. Taken partition by partition after the read had opened (at an
	// earlier partition), an entry committed and consumed in between was
	// below the cursors but not in the read, and the level's start point
	// moved past it: never deleted, in the depth for good
	// (TestEvictSeesEntriesItsCursorsPassed).
	views := make([][]partState, q.cfg.Partitions)
	holds := make([]uint64, q.cfg.Partitions)
	for p := range views {
		var deleted bool
		if views[p], holds[p], deleted = q.evictViews(p); deleted {
			return low, nil
		}
	}
	var levels []levelMax
	var lstates []*levelState
	var holes []position
	for p := 0; p < q.cfg.Partitions; p++ {
		states, hold := views[p], holds[p]
		if hold != 0 {
			low = min(low, hold)
		}
		for _, st := range states {
			for i := range st.levels {
				low = min(low, st.levels[i].cursor())
			}
		}
		ix := &q.index[p]
		levels = ix.snapshot(levels[:0])
		for _, lm := range levels {
			prio := lm.prio
			// bound: every group consumed every entry below it (the
			// lowest cursor, holes included). posBound: the lowest scan
			// position; below it, only the entries at some group's hole
			// are not consumed by all. A hole is a producer that was in
			// progress when a scan passed it — one still open, waiting
			// for room in this queue maybe: deleting only below bound
			// kept every consumed entry after it, so the room it waited
			// for never came (TestEvictPastOpenProducer).
			// lowPos: the lowest scan position itself, to the event.
			bound, lowPos := uint64(0), position{}
			lstates = lstates[:0]
			if len(states) > 0 {
				bound, lowPos = ^uint64(0), position{wp: ^uint64(0)}
				for _, st := range states {
					l := st.find(prio)
					if l == nil {
						bound, lowPos = 0, position{}
						break
					}
					bound = min(bound, l.cursor())
					lowPos = minPos(lowPos, l.pos)
					lstates = append(lstates, l)
				}
			}
			posBound := lowPos.wp // positions order by pointer first
			atHole := func(wp uint64) bool {
				for _, l := range lstates {
					if slices.ContainsFunc(l.holes, func(h position) bool { return h.wp == wp }) {
						return true
					}
				}
				return false
			}
			// The holes up to posBound: a group that reads one (its
			// producer committed) may move neither bound nor posBound
			// (an older hole stays, an open producer pins the position),
			// yet what it read there is consumed now
			// (TestEvictReadHoleBehindOlderHole); at posBound itself,
			// the entries every group read to their end are
			// (TestEvictEntryReadToItsEndAfterHole). To the event: a hole
			// read in part moves inside its pointer.
			holes = holes[:0]
			for _, l := range lstates {
				for _, h := range l.holes {
					if h.wp <= posBound {
						holes = append(holes, h)
					}
				}
			}
			slices.SortFunc(holes, comparePos)
			holes = slices.Compact(holes)
			if ttl == 0 && bound > 0 && bound <= lm.evictFrom && !lm.evictPos.less(lowPos) && slices.Equal(holes, lm.evictHoles) {
				// Nothing consumed since the last pass and nothing can
				// expire: the first entry left is at or above bound or
				// at a hole, and low is already at or below it (bound
				// is one of the cursors low took; 0 means a group has
				// none here).
				continue
			}
			if txn == nil {
				txn, inFlight = b.readInFlight()
				b.evictReads.Add(1)
			}
			lp := levelPrefix(q.id, uint16(p), prio)
			it := txn.NewIterator(badger.IteratorOptions{Prefix: lp})
			kept := ^uint64(0)
			reread := false // kept an entry in flight: read the level next pass
			var err error
			for it.Seek(entrySeek(q.id, uint16(p), prio, lm.evictFrom, 0)); it.ValidForPrefix(lp); it.Next() {
				k, ok := decodeEntryKey(it.Item().Key())
				if !ok {
					continue
				}
				// At the lowest position's own pointer, an entry every
				// group read to its end is consumed too: a position can
				// rest there (the end of a level's last entry, after a
				// hole at its own pointer filled a Dequeue), and no read
				// moves it on while nothing follows; kept, the entry
				// stayed in the depth, holding room no consumer could
				// free (TestEvictEntryReadToItsEnd).
				consumed := k.wp < bound || (k.wp < posBound && !atHole(k.wp)) ||
					(k.wp == posBound && readByAll(lstates, &k))
				stale := ttl > 0 && now.Sub(time.UnixMilli(k.ms)) > ttl
				var expired uint32 // of its events, those counted expired
				if stale && !consumed && inFlight[k.wp] == 0 {
					took, ask := false, !snapped
					for {
						var t, again bool
						expired, consumed, t, again = q.mayExpire(p, ev, &k, snap, ask)
						stale = expired > 0
						took = took || t
						if !again {
							break
						}
						snap, snapped, ask = b.snapshotTx(), true, false
					}
					if took && !slices.Contains(gated, p) {
						gated = append(gated, p)
					}
				}
				if held := inFlight[k.wp] > 0; held || (!consumed && !stale) {
					kept = min(kept, k.wp)
					low = min(low, k.wp)
					if held {
						reread = true
					}
					if k.wp < posBound {
						continue // at a hole or held: what follows may be consumed
					}
					break
				}
				if err = del.add(it.Item().KeyCopy(nil), expired); err != nil {
					break
				}
			}
			it.Close()
			if err != nil {
				return low, err
			}
			// Nothing can land below min(bound, kept) any more: a producer
			// still in flight with a lower pointer is a hole of some group,
			// and holes are at or above the group's cursor.
			if reread {
				lowPos = position{}
			}
			moves = append(moves, evictMove{ix: ix, prio: prio, from: max(lm.evictFrom, min(bound, kept)), pos: lowPos, holes: slices.Clone(holes)})
		}
	}
	if err := del.flush(); err != nil {
		return low, err
	}
	for _, m := range moves {
		m.ix.setEvictFrom(m.prio, m.from, m.pos, m.holes)
	}
	return low, nil
}

// evictingTx is the ownerTx of a slot an eviction pass holds (mayExpire):
// never ended, so no consumer takes it over.
const evictingTx = ^uint64(0)

// mayExpire tells whether an eviction pass may delete entry k of partition
// p as expired before some group read it (expired: how many of its events
// count expired, those some group has not read, undone; 0: it may not),
// judged by the groups'
// committed states now (a consumer may have committed it since the pass
// took its views: then consumed, and it goes as such). It may if no
// consumer holds the partition for a group that has not read it: the pass,
// standing as ev, holds those groups' slots itself (took: it took one)
// until its deletes landed (endExpiry), so no transaction reads the entry
// meanwhile. Before, a transaction that had read it delivered it (or
// counted it expired itself) and committed after the pass counted it in
// QueueInfo.Expired: counted twice (TestTTLEvictionRacingDeliveryCountsOnce).
// Groups that read it already are not held: a consumer of theirs never
// reads it again, and a partition a busy group's consumers always hold
// still expires what a group without consumers leaves. An entry a group
// read part of (a Dequeue stopped inside it) counted all its events
// expired, those it consumed too (TestTTLEvictionPartlyReadEntryCountsOnce).
// A slot no consumer
// resolved since Open is judged by the newest stored version snap sees
// (infoView): by the oldest, which is what the pass deletes by, a read the
// last commit before a restart counted consumed was counted expired too
// (general path, TestTTLEvictionAfterRestartCountsOnce). A lease whose
// transaction ended in snap before it wrote (lost: a step stuck past its
// timeout) is taken over, as a consumer would (leaseEndLocked): its state in
// memory is the slot's, and the lost transaction's late calls leave the
// slot alone. Its group's only consumer may be the stuck one, and every
// entry that group had not read waited for it, for good
// (TestTTLEvictionPastLostLease). One that wrote waits for a consumer to
// take it over (adoptLocked), or for its PostCommit. Without snap, with
// ask, it asks for one (again) where it needs it, telling nothing else:
// most passes need none, and a transaction in progress, even one only for
// its snapshot, makes consumers keep holes at its pointer.
func (q *queueRT) mayExpire(p int, ev *consumer, k *entryKey, snap *tx.Tx, ask bool) (expired uint32, consumed, took, again bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return 0, false, false, false
	}
	consumed = true
	for _, g := range q.groups {
		s := g.slots[p]
		if ask && !s.resolved && len(s.versions) > 1 {
			return 0, false, took, true
		}
		var l *levelState
		if st := s.infoView(snap); st != nil {
			l = st.find(k.prio)
		}
		if readEntry(l, k) {
			continue
		}
		consumed = false
		expired = max(expired, undone(l, k))
		switch s.owner {
		case ev:
		case nil:
			s.owner, s.ownerTx, took = ev, evictingTx, true
		default:
			if ask {
				return 0, false, took, true
			}
			if snap == nil || leaseEndLocked(s, endedIn(snap, s.ownerTx)) != leaseEnded {
				return 0, false, took, false // a consumer may be reading it
			}
			s.owner, s.ownerTx, s.unpublished, took = ev, evictingTx, time.Time{}, true
		}
	}
	return expired, consumed, took, false
}

// readEntry reports whether a group with level state l has read (or
// skipped) every event of entry k: its position is at or past the entry's
// end, and no hole of its pointer starts before that end. To the chunk,
// not just the pointer as the pass's bounds go: a group whose read stopped
// right after the entry (a Dequeue full) has its position at the entry's
// pointer, and the entry counted expired too.
func readEntry(l *levelState, k *entryKey) bool {
	if l == nil {
		return false
	}
	end := position{wp: k.wp, chunk: k.chunk + 1}
	if l.pos.less(end) {
		return false
	}
	return !slices.ContainsFunc(l.holes, func(h position) bool { return h.wp == k.wp && h.less(end) })
}

// readByAll reports whether every group, with level states ls, has read
// every event of entry k (readEntry).
func readByAll(ls []*levelState, k *entryKey) bool {
	for _, l := range ls {
		if !readEntry(l, k) {
			return false
		}
	}
	return len(ls) > 0
}

// endExpiry gives back the slots mayExpire took for ev in partitions
// parts, waking the consumers that skipped one where something is left.
func (q *queueRT) endExpiry(ev *consumer, parts []int) {
	if len(parts) == 0 {
		return
	}
	wake := false
	q.mu.Lock()
	for _, p := range parts {
		for _, g := range q.groups {
			if ev.releaseLocked(p, g.slots[p]) {
				wake = true
			}
		}
	}
	q.mu.Unlock()
	if wake {
		q.notify()
	}
}

type evictMove struct {
	ix    *partIndex
	prio  uint8
	from  uint64
	pos   position
	holes []position
}

// deleteChunk bounds the keys a keyDeleter holds before it writes them.
const deleteChunk = 4096

// keyDeleter deletes keys in batches and counts the events and bytes of
// the entry keys it deleted (expired: of those marked so). A batch whose
// write failed may have landed in part — Badger commits a large WriteBatch
// in several transactions — so then it counts what a fresh read no longer
// finds: counting none left the depth high for good (and all, low), and
// the limits with it (TestFailedDeleteDepth).
type keyDeleter struct {
	b                      *Backend
	q                      *queueRT // the queue whose entries these are (nil: none to tell)
	keys                   [][]byte
	expiring               []uint32 // per key: of its events, those counted expired
	events, bytes, expired int64
}

func (d *keyDeleter) add(key []byte, expired uint32) error {
	d.keys = append(d.keys, key)
	d.expiring = append(d.expiring, expired)
	if len(d.keys) >= deleteChunk {
		return d.flush()
	}
	return nil
}

// flush writes the pending deletes and counts what they removed.
func (d *keyDeleter) flush() error {
	if len(d.keys) == 0 {
		return nil
	}
	err := d.b.deleteKeys(d.keys)
	var stored map[string]bool
	if err != nil {
		stored = d.b.stillStored(d.keys)
	}
	var staged map[uint64]*stagedTx
	if d.q != nil {
		staged = d.q.stagedTxs()
	}
	for i, k := range d.keys {
		if err != nil && stored[string(k)] {
			continue
		}
		if ek, ok := decodeEntryKey(k); ok {
			d.events += int64(ek.count)
			d.bytes += int64(ek.size)
			d.expired += int64(min(d.expiring[i], ek.count))
			if s := staged[ek.wp]; s != nil {
				s.deletedEvents += int64(ek.count)
				s.deletedBytes += int64(ek.size)
			}
		}
	}
	d.keys, d.expiring = d.keys[:0], d.expiring[:0]
	return err
}

// deleteKeysTestHook, if set, replaces deleteKeys's write (tests: a write
// that fails partway). Atomic: a background pass may read it meanwhile.
var deleteKeysTestHook atomic.Pointer[func(db *badger.DB, keys [][]byte) error]

// deleteKeys deletes keys in one WriteBatch.
func (b *Backend) deleteKeys(keys [][]byte) error {
	if h := deleteKeysTestHook.Load(); h != nil {
		return (*h)(b.db, keys)
	}
	wb := b.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// stillStored returns the keys a fresh read still finds, after a delete
// that failed. If the read fails too, every key: the depth then errs high
// (never past the limits), until Open recounts.
func (b *Backend) stillStored(keys [][]byte) map[string]bool {
	stored := make(map[string]bool, len(keys))
	err := b.db.View(func(txn *badger.Txn) error {
		for _, k := range keys {
			_, err := txn.Get(k)
			switch {
			case err == nil:
				stored[string(k)] = true
			case !errors.Is(err, badger.ErrKeyNotFound):
				return err
			}
		}
		return nil
	})
	if err != nil {
		for _, k := range keys {
			stored[string(k)] = true
		}
	}
	return stored
}

// evictViews copies the committed states of every group for partition p,
// and returns the smallest slot hold (0: none; see slot.hold).
// A group that never committed a transaction there has an empty state, which
// holds eviction at 0.
func (q *queueRT) evictViews(p int) ([]partState, uint64, bool) {
	if h := evictViewsTestHook; h != nil {
		h(p)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return nil, 0, true
	}
	out := make([]partState, 0, len(q.groups))
	var hold uint64
	for _, g := range q.groups {
		s := g.slots[p]
		if s.hold != 0 && (hold == 0 || s.hold < hold) {
			hold = s.hold
		}
		if st := s.evictView(); st != nil {
			out = append(out, st.clone())
		} else {
			out = append(out, partState{})
		}
	}
	return out, hold, false
}

// evictViewsTestHook, if set, runs in evictViews before it takes partition
// p's states (tests: to commit there).
var evictViewsTestHook func(p int)
