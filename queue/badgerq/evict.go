package badgerq

import (
	"time"

	"github.com/dgraph-io/badger/v4"
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
	if b.pruner != nil && !b.opts.FastPath && prune != ^uint64(0) {
		b.pruner.Report(prune)
	}
	return nil
}

// evictQueue returns the lowest bound it kept data above: no data of any
// transaction below it remains in this queue (for invalid-list pruning).
func (b *Backend) evictQueue(q *queueRT) (uint64, error) {
	now := b.opts.Now()
	ttl := q.cfg.TTL
	low := ^uint64(0)
	var delEvents, delBytes, expired int64

	wb := b.db.NewWriteBatch()
	defer wb.Cancel()
	txn := b.db.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix(q.id)})
	defer it.Close()

	for p := 0; p < q.cfg.Partitions; p++ {
		states, deleted := q.evictViews(p)
		if deleted {
			return low, nil
		}
		for _, st := range states {
			for i := range st.levels {
				low = min(low, st.levels[i].cursor())
			}
		}
		pp := partPrefix(q.id, uint16(p))
		next := 0
		for next <= maxPriorInv {
			it.Seek(append(pp, byte(next)))
			if !it.ValidForPrefix(pp) {
				break
			}
			inv := it.Item().Key()[partPfxLen]
			next = int(inv) + 1
			prio := maxPriorInv - inv
			bound := uint64(0)
			if len(states) > 0 {
				bound = ^uint64(0)
				for _, st := range states {
					l := st.find(prio)
					if l == nil {
						bound = 0
						break
					}
					bound = min(bound, l.cursor())
				}
			}
			lp := levelPrefix(q.id, uint16(p), prio)
			for ; it.ValidForPrefix(lp); it.Next() {
				k, ok := decodeEntryKey(it.Item().Key())
				if !ok {
					continue
				}
				consumed := k.wp < bound
				stale := ttl > 0 && now.Sub(time.UnixMilli(k.ms)) > ttl
				if !consumed && !stale {
					low = min(low, k.wp)
					break
				}
				if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
					return low, err
				}
				delEvents += int64(k.count)
				delBytes += int64(k.size)
				if !consumed {
					expired += int64(k.count)
				}
			}
		}
	}
	if err := wb.Flush(); err != nil {
		return low, err
	}
	if delEvents > 0 {
		q.events.Add(-delEvents)
		q.bytes.Add(-delBytes)
		q.expired.Add(expired)
		q.signalSpace()
	}
	return low, nil
}

// evictViews copies the committed states of every group for partition p.
// A group that never committed a transaction there has an empty state, which
// holds eviction at 0.
func (q *queueRT) evictViews(p int) ([]partState, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.deleted {
		return nil, true
	}
	out := make([]partState, 0, len(q.groups))
	for _, g := range q.groups {
		if st := g.slots[p].evictView(); st != nil {
			out = append(out, st.clone())
		} else {
			out = append(out, partState{})
		}
	}
	return out, false
}
