package badgerq

import (
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// Info implements queue.Backend. Lag is counted from entry keys and the
// groups' committed cursors; no value is read.
func (b *Backend) Info(name string) (queue.QueueInfo, error) {
	q, err := b.queue(name)
	if err != nil {
		return queue.QueueInfo{}, err
	}
	return b.info(q)
}

// Queues implements queue.Backend.
func (b *Backend) Queues() ([]queue.QueueInfo, error) {
	var out []queue.QueueInfo
	for _, q := range b.queueList() {
		info, err := b.info(q)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

type groupView struct {
	info   queue.GroupInfo
	states []partState
}

func (b *Backend) info(q *queueRT) (queue.QueueInfo, error) {
	snap := b.unresolvedSnapshot(q)
	if snap != nil {
		defer b.opts.Coordinator.Abort(snap)
	}
	q.mu.Lock()
	var views []*groupView
	for _, gm := range q.meta.Groups {
		g := q.groups[gm.Name]
		v := &groupView{info: queue.GroupInfo{Group: g.meta.Group}, states: make([]partState, len(g.slots))}
		for p, s := range g.slots {
			if st := s.infoView(snap); st != nil {
				v.states[p] = st.clone()
				v.info.Consumed += int64(st.consumed)
				v.info.Expired += int64(st.expired)
			}
		}
		views = append(views, v)
	}
	q.mu.Unlock()
	info := queue.QueueInfo{Name: q.name, Config: q.cfg, Expired: q.expired.Load()}
	// The depth is counted from the same read as the lag, not taken from
	// the depth counter: a commit is in the store before its PostCommit
	// adds it to the counter, and an eviction or truncate in between takes
	// it from the counter first, so the counter next to the read gave a lag
	// above the depth and a depth below 0 (TestInfoLagNotAboveEvents).
	// Every stored entry counts, as in the lag, those persisted and not
	// committed yet too (general path, until the commit or rollback ends):
	// left out of the lag, a commit whose producer's PostCommit had not run
	// yet showed no lag where a drain check needs it to.
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix(q.id)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k, ok := decodeEntryKey(it.Item().Key())
			if !ok || int(k.part) >= q.cfg.Partitions {
				continue // not an entry of this queue (countDepth skips it too)
			}
			info.Events += int64(k.count)
			info.Bytes += int64(k.size)
			for _, v := range views {
				v.info.Lag += int64(undone(v.states[k.part].find(k.prio), &k))
			}
		}
		return nil
	})
	for _, v := range views {
		info.Groups = append(info.Groups, v.info)
	}
	return info, err
}

// unresolvedSnapshot is a snapshot that tells which stored state version
// of a slot no consumer resolved since Open committed (infoView), if q has
// such a slot of several versions and the backend a coordinator, else nil.
// The caller aborts it.
func (b *Backend) unresolvedSnapshot(q *queueRT) *tx.Tx {
	if !q.hasUnresolvedVersions() {
		return nil
	}
	return b.snapshotTx()
}

// snapshotTx starts a transaction for its snapshot only (nil without a
// coordinator, or if it cannot start one); the caller aborts it.
func (b *Backend) snapshotTx() *tx.Tx {
	c := b.opts.Coordinator
	if c == nil {
		return nil
	}
	t, err := c.StartShort(min(time.Minute, c.MaxTimeout()))
	if err != nil {
		return nil
	}
	return t
}

// hasUnresolvedVersions reports whether a slot not resolved yet stores
// more than one state version (general path, after a restart).
func (q *queueRT) hasUnresolvedVersions() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, g := range q.groups {
		for _, s := range g.slots {
			if !s.resolved && len(s.versions) > 1 {
				return true
			}
		}
	}
	return false
}

// infoView is the state Info reports for a slot: the committed one, or
// before the slot is resolved the newest stored version snap sees.
// evictView (the oldest, always committed) is what eviction may trust, but
// on the general path it is one commit behind after a restart until a
// consumer resolves the slot: Info reported the lag too high and the
// consumed count too low (TestInfoAfterRestartGeneralPath). Under q.mu.
func (s *slot) infoView(snap *tx.Tx) *partState {
	if !s.resolved && snap != nil {
		if i := newestVisible(s.versions, snap); i < len(s.versions) {
			return &s.versions[i].st
		}
	}
	return s.evictView()
}

// undone is how many events of entry k a group with level state l has not
// consumed yet.
func undone(l *levelState, k *entryKey) uint32 {
	if l == nil {
		return k.count
	}
	i, isHole := slices.BinarySearchFunc(l.holes, k.wp, func(h position, wp uint64) int {
		switch {
		case h.wp < wp:
			return -1
		case h.wp > wp:
			return 1
		}
		return 0
	})
	pos := l.pos
	if isHole {
		pos = l.holes[i]
	}
	switch at := (position{wp: k.wp, chunk: k.chunk}); {
	case isHole && k.chunk < pos.chunk, !isHole && at.less(position{wp: pos.wp, chunk: pos.chunk}):
		return 0
	case k.wp == pos.wp && k.chunk == pos.chunk:
		return k.count - min(k.count, pos.idx)
	}
	return k.count
}

// Scan implements queue.Backend: HQueue's queue, partition and combined
// scanners in one call.
func (b *Backend) Scan(name string, opts queue.ScanOptions, fn func(queue.Entry) bool) error {
	q, err := b.queue(name)
	if err != nil {
		return err
	}
	if err := queue.CheckScanLimit(opts.Limit); err != nil {
		return err
	}
	parts := queue.ScanPartitions(opts.Partitions) // each once, in order
	for _, p := range parts {
		// As Queues checks: a key holds the partition in 16 bits, so one
		// out of range read another partition under the number asked for.
		if p < 0 || p >= q.cfg.Partitions {
			return fmt.Errorf("%w: partition %d not in [0, %d)", queue.ErrBadConfig, p, q.cfg.Partitions)
		}
	}
	if parts == nil {
		for p := range q.cfg.Partitions {
			parts = append(parts, p)
		}
	}
	n := 0
	return b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix(q.id)})
		defer it.Close()
		for _, p := range parts {
			pp := partPrefix(q.id, uint16(p))
			for it.Seek(pp); it.ValidForPrefix(pp); it.Next() {
				item := it.Item()
				k, ok := decodeEntryKey(item.Key())
				if !ok {
					continue
				}
				if k.wp < opts.From || (opts.To != 0 && k.wp > opts.To) {
					continue
				}
				// The enqueue time is stored in milliseconds: compare in
				// milliseconds, or an event enqueued at Since itself (its
				// stored time rounded down, before Since) was left out.
				if (!opts.Since.IsZero() && k.ms < opts.Since.UnixMilli()) || (!opts.Until.IsZero() && k.ms > opts.Until.UnixMilli()) {
					continue
				}
				enq := time.UnixMilli(k.ms)
				if opts.Tx != nil && !opts.Tx.Visible(k.wp) {
					continue
				}
				val, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				r, err := newEventReader(val)
				if err != nil {
					return err
				}
				for idx := uint32(0); idx < k.count; idx++ {
					var ev queue.Event
					if err := r.next(&ev); err != nil {
						return fmt.Errorf("badgerq: entry %d/%d/%d.%d: %w", p, k.prio, k.wp, k.chunk, err)
					}
					ev.Priority = k.prio
					e := queue.Entry{ID: queue.EntryID{Partition: p, Priority: k.prio, Pointer: k.wp, Chunk: k.chunk, Index: idx}, Event: ev, Enqueued: enq}
					if !fn(e) {
						return nil
					}
					if n++; opts.Limit > 0 && n >= opts.Limit {
						return nil
					}
				}
			}
		}
		return nil
	})
}
