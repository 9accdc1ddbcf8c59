package badgerq

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// Options tune a Backend. The zero value is usable.
type Options struct {
	// EvictInterval is how often background eviction runs (default 200ms;
	// negative disables it: call Maintain).
	EvictInterval time.Duration
	// GCInterval is how often value-log GC runs (default 30s; negative
	// disables it); when anything was freed since the last reclaim, the
	// tick runs a full reclaim instead. GCDiscardRatio is Badger's discard
	// ratio (default 0.5).
	GCInterval     time.Duration
	GCDiscardRatio float64
	// ReclaimBytes: once this many payload bytes were evicted, truncated or
	// deleted since the last reclaim, background eviction runs one
	// (reclaim.go: flush memtables, compact the LSM, value-log GC). Default
	// 64 MiB; negative disables it (Maintain still reclaims).
	ReclaimBytes int64
	// ChunkBytes caps one packed value (default 256 KiB). Larger runs of one
	// transaction, partition and priority are split into chunks.
	ChunkBytes int
	// SpreadRun is how many keyless events a producer puts into one partition
	// before moving to the next (default 256). Each transaction also starts on
	// the next partition, so partitions fill evenly while values stay packed.
	SpreadRun int
	// Coordinator, when set, gets a pruner so its invalid list stays bounded.
	// With FastPath (every Context over these queues runs the single-store
	// fast path) no invalid data ever lands and NoInvalidData is reported
	// once; otherwise eviction reports the pointer below which nothing is left.
	Coordinator *tx.Coordinator
	FastPath    bool
	// Sync makes the backend's own writes durable before they return: queue
	// and group metadata, truncation and deletion, and on the general path
	// Persist (before the commit record is written). Set it together with
	// tx.BadgerLogOptions{Sync: true}; the fast path's commits are synced by
	// the log. Eviction's deletes are never synced: replaying them is
	// harmless.
	Sync bool
	// WritebackInterval: without Sync, how often the DB's files are synced
	// in the background while producers commit, so that Badger's own sync
	// when it rotates a file (in its write path) stays short (writeback.go).
	// Default 20ms; negative disables it. Ignored with Sync.
	WritebackInterval time.Duration
	// Now is the clock (default time.Now), for TTL tests.
	Now func() time.Time
	// PostCommitWait: a consumer transaction that committed and whose
	// PostCommit has not published its state (its Context died after the
	// commit, or is slow to get there) keeps its partitions this long from
	// when another consumer first found them so; then that one takes them
	// over with the committed state the store holds (default 1s). Until
	// then it waits, so that a slow PostCommit still comes before the next
	// transaction's on the same partition.
	PostCommitWait time.Duration
}

func (o *Options) withDefaults() {
	if o.EvictInterval == 0 {
		o.EvictInterval = 200 * time.Millisecond
	}
	if o.GCInterval == 0 {
		o.GCInterval = 30 * time.Second
	}
	if o.WritebackInterval == 0 {
		o.WritebackInterval = 20 * time.Millisecond
	}
	if o.GCDiscardRatio == 0 {
		o.GCDiscardRatio = 0.5
	}
	if o.ReclaimBytes == 0 {
		o.ReclaimBytes = 64 << 20
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = 256 << 10
	}
	if o.SpreadRun <= 0 {
		o.SpreadRun = 256
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.PostCommitWait <= 0 {
		o.PostCommitWait = time.Second
	}
}

// Backend implements queue.Backend on a *badger.DB it does not own.
type Backend struct {
	db   *badger.DB
	opts Options

	mu     sync.RWMutex
	queues map[string]*queueRT
	closed bool
	// shut is closed, read without b.mu: producers and consumers check it
	// on their hot paths, and a producer waiting for room stops waiting.
	shut atomic.Bool

	kick   chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
	pruner *tx.Pruner

	evictMu sync.Mutex // one eviction pass at a time

	// Invalid-list pruning on the general path (prune.go): the highest bound
	// reported, and the write pointers whose Persist wrote data that is not
	// committed or rolled back yet.
	pruneMu       sync.Mutex
	pruneReported uint64
	persisting    map[uint64]int

	freed      atomic.Int64 // payload bytes evicted, truncated or deleted since Open
	produced   atomic.Int64 // payload bytes committed by producers since Open
	wroteBack  atomic.Int64 // writeback syncs so far (tests)
	evictReads atomic.Int64 // eviction passes over a queue that read Badger (tests)
	// writebackIdle: the writeback loop found nothing produced and waits on
	// writebackWake instead of ticking (an idle app wakes for nothing).
	writebackIdle atomic.Bool
	writebackWake chan struct{}
	reclaimedAt   atomic.Int64 // freed when the last reclaim started
	// followUps: reclaims still to run on GC ticks after one whose GC
	// collected nothing (see the GC tick in loop).
	followUps atomic.Int32
	reclaimMu sync.Mutex
	// reclaiming: the background loop's reclaim or GC runs, on a goroutine
	// of its own (see goReclaim).
	reclaiming atomic.Bool
}

var _ queue.Backend = (*Backend)(nil)

// queueMeta is what "qm<name>" holds.
type queueMeta struct {
	ID        uint32
	Config    queue.Config
	Groups    []groupMeta
	NextGroup uint16
}

type groupMeta struct {
	ID uint16
	queue.Group
}

// queueRT is a queue's in-memory runtime state.
type queueRT struct {
	name string
	id   uint32
	cfg  queue.Config

	mu      sync.Mutex // guards meta, groups and every slot
	meta    queueMeta
	groups  map[string]*groupRT
	deleted bool
	// dead mirrors deleted for the producers' hot path (no lock): a commit
	// that lands after DeleteQueue's sweep sees it and sweeps again.
	dead atomic.Bool

	events, bytes atomic.Int64 // committed, not evicted
	// usedEvents, usedBytes: events and bytes plus the reservations of
	// producers in flight, what the depth limits bound. One counter each,
	// so that a producer's commit (its reservation becomes depth) changes
	// nothing a producer checking for room reads: with two counters, one
	// read before the commit and one after counted its events in neither
	// (TestDepthCheckSeesCommitBetweenLoads).
	usedEvents, usedBytes atomic.Int64
	expired               atomic.Int64 // evicted by TTL before every group read them
	// expiries counts the eviction passes that expired entries in slots
	// they held (mayExpire), each after its deletes landed and before it
	// gave the slots back: a Dequeue whose read opened before one reopens
	// it for a partition it leases after (the read still saw what the
	// pass deleted, and the event counted twice).
	expiries atomic.Uint64
	spaceMu  sync.Mutex
	space    chan struct{} // closed when depth shrinks
	rr       atomic.Uint32 // producers' rotating start partition
	// leaseWait: a consumer skipped a partition leased by another
	// transaction; the background loop wakes the consumers once such a
	// transaction ends without releasing its leases (wakeLeaseWaiters).
	leaseWait atomic.Bool
	index     []partIndex // one per partition, see index.go

	// In a queue with a limit (see reserve): holders counts the producers
	// whose transaction holds a reservation here; waiters (under spaceMu)
	// are the producers waiting for room, nWaiters their number. A holder
	// ending decrements holders, then reads nWaiters; a waiter registers,
	// then reads holders: one sees the other. Atomics, so that a commit
	// takes no lock while nobody waits.
	holders  atomic.Int64
	waiters  []*roomWaiter
	nWaiters atomic.Int64

	// producers: every producer of the queue (weak: a dropped one leaves),
	// for deletes to find the commits they staged (see stagedTx).
	prodMu    sync.Mutex
	producers []weak.Pointer[producer]

	// Wake-ups (see consumer.Ready and queue.GenNotifier): gen counts
	// notifies; readyCh is closed by the next one. A notify with nobody
	// waiting (waiting false) is an atomic add and load, no lock: the
	// producers' hot path.
	gen     atomic.Uint64
	waiting atomic.Bool // readyCh is non-nil
	readyMu sync.Mutex
	readyCh chan struct{} // closed by notify; nil while nobody waits
}

// closedCh is a closed channel: ReadyAt's answer once the generation moved.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ready returns a channel closed at the next notify (see consumer.Ready).
func (q *queueRT) ready() <-chan struct{} { return q.readyAt(q.gen.Load()) }

// readyAt returns a channel closed at the first notify after the one that
// made the generation gen: closed already if the generation moved on.
//
// No wake-up is lost: waiting is stored before gen is loaded here, and a
// notify adds to gen before it loads waiting (both sequentially
// consistent), so either this load sees the notify's generation, or the
// notify sees waiting and closes the channel returned here (under readyMu).
func (q *queueRT) readyAt(gen uint64) <-chan struct{} {
	q.readyMu.Lock()
	defer q.readyMu.Unlock()
	if q.readyCh == nil {
		q.readyCh = make(chan struct{})
		q.waiting.Store(true)
	}
	if q.gen.Load() != gen {
		return closedCh
	}
	return q.readyCh
}

// notify wakes every consumer waiting on ready: called after a producer's
// commit returned (so a transaction started after the wake-up sees it), and
// after whatever else can give a waiting consumer something to read.
func (q *queueRT) notify() {
	q.gen.Add(1)
	if !q.waiting.Load() {
		return
	}
	q.readyMu.Lock()
	if q.readyCh != nil {
		close(q.readyCh)
		q.readyCh = nil
		q.waiting.Store(false)
	}
	q.readyMu.Unlock()
}

type groupRT struct {
	meta  groupMeta
	slots []*slot // one per partition
	fifo  atomic.Uint32
}

// slot is one group's cursor state for one partition. owner is the consumer
// whose transaction holds the partition: at most one at a time, which is what
// makes FIFO safe and rescaling a plain reassignment.
type slot struct {
	owner     *consumer
	ownerTx   uint64 // the id of owner's transaction that took the lease
	skipped   bool   // a consumer found it leased: wake consumers at the release
	resolved  bool
	versions  []stateVersion // as loaded, until resolved
	committed stateVersion
	// unpublished is when a consumer first found that owner's transaction
	// committed with its PostCommit not run (zero: not found so); the
	// lease is taken over Options.PostCommitWait later (adoptLocked).
	unpublished time.Time
	// hold is the smallest write pointer of a state version that may be
	// stored for this slot without being committed (a consumer that
	// persisted and died, seen when the slot was resolved, or whose
	// rollback failed); 0 if none. It holds invalid-list pruning until the
	// slot's stored value is written again (prune.go).
	hold uint64
}

// evictView is the state eviction may trust: the committed one, or before
// resolution the oldest stored version, which is always committed.
func (s *slot) evictView() *partState {
	if s.resolved {
		return &s.committed.st
	}
	if n := len(s.versions); n > 0 {
		return &s.versions[n-1].st
	}
	return nil
}

// newestVisible is the index of the newest of a slot's stored versions vs
// (newest first) that t sees, len(vs) if none: a version of pointer 0 is
// committed for all.
func newestVisible(vs []stateVersion, t *tx.Tx) int {
	for i, v := range vs {
		if v.wp == 0 || t.Visible(v.wp) {
			return i
		}
	}
	return len(vs)
}

// resolve picks the newest version visible to t.
func (s *slot) resolve(t *tx.Tx) {
	if s.resolved {
		return
	}
	i := newestVisible(s.versions, t)
	if i < len(s.versions) {
		s.committed = s.versions[i]
	}
	for _, v := range s.versions[:i] {
		// A newer version t does not see stays stored until the slot is
		// written again: the committed state in memory may move past its
		// pointer (an aborted empty step keeps its moves), so it holds
		// pruning itself.
		s.holdAt(v.wp)
	}
	s.versions = nil
	s.resolved = true
}

// Open loads every queue's metadata and cursor state and starts background
// eviction. The DB stays the caller's: Close does not close it.
func Open(db *badger.DB, opts Options) (*Backend, error) {
	opts.withDefaults()
	b := &Backend{db: db, opts: opts, queues: map[string]*queueRT{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), persisting: map[uint64]int{}}
	if err := b.load(); err != nil {
		return nil, err
	}
	if err := b.dropOrphans(); err != nil {
		return nil, err
	}
	if c := opts.Coordinator; c != nil {
		b.pruner = c.RegisterPruner("queue")
		if opts.FastPath {
			b.pruner.Report(tx.NoInvalidData)
		}
	}
	b.wg.Add(1)
	go b.background()
	if !opts.Sync && opts.WritebackInterval > 0 && !db.Opts().InMemory {
		b.writebackWake = make(chan struct{}, 1)
		b.wg.Add(1)
		go b.writeback()
	}
	return b, nil
}

// DB returns the underlying store.
func (b *Backend) DB() *badger.DB { return b.db }

func (b *Backend) load() error {
	ids := map[uint32]string{}
	return b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(metaPrefix), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			name := string(it.Item().Key()[len(metaPrefix):])
			var m queueMeta
			if err := it.Item().Value(func(v []byte) (err error) { m, err = decodeMeta(name, v); return err }); err != nil {
				return fmt.Errorf("badgerq: queue meta %q: %w", it.Item().Key(), err)
			}
			if other := ids[m.ID]; other != "" {
				return fmt.Errorf("badgerq: queues %q and %q have the same id %d: %w", other, name, m.ID, queue.ErrCorrupt)
			}
			ids[m.ID] = name
			q := newQueueRT(name, m)
			if err := q.loadStates(txn); err != nil {
				return err
			}
			if err := q.countDepth(txn); err != nil {
				return err
			}
			b.queues[q.name] = q
		}
		return nil
	})
}

// decodeMeta reads the metadata of queue name and checks it as Queues
// checks what it passes to CreateQueue and AddGroup, and the ids as the
// backend hands them out: garbage there (a torn or foreign value) made Open
// panic (a negative partition count) or every Enqueue and FIFO Dequeue (no
// partitions), or gave a later AddGroup a live group's id. Errors wrap
// queue.ErrCorrupt.
func decodeMeta(name string, v []byte) (queueMeta, error) {
	var m queueMeta
	bad := func(format string, args ...any) (queueMeta, error) {
		return queueMeta{}, fmt.Errorf("%w: %s", queue.ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if err := json.Unmarshal(v, &m); err != nil {
		return bad("%v", err)
	}
	if err := queue.CheckName("queue", name); err != nil {
		return bad("%v", err)
	}
	if m.ID == 0 {
		return bad("queue id 0")
	}
	if err := m.Config.Validate(); err != nil {
		return bad("%v", err)
	}
	names := map[string]bool{}
	ids := map[uint16]bool{}
	for _, g := range m.Groups {
		if err := g.Validate(m.Config); err != nil {
			return bad("group %q: %v", g.Name, err)
		}
		if names[g.Name] || ids[g.ID] {
			return bad("group %q (id %d) listed twice", g.Name, g.ID)
		}
		names[g.Name], ids[g.ID] = true, true
		// NextGroup 0: the ids wrapped (AddGroup refuses more).
		if g.ID == 0 || (m.NextGroup != 0 && g.ID >= m.NextGroup) {
			return bad("group %q has id %d, next id %d", g.Name, g.ID, m.NextGroup)
		}
	}
	return m, nil
}

func newQueueRT(name string, m queueMeta) *queueRT {
	q := &queueRT{name: name, id: m.ID, cfg: m.Config, meta: m, groups: map[string]*groupRT{}, space: make(chan struct{}), index: make([]partIndex, m.Config.Partitions)}
	for _, g := range m.Groups {
		q.groups[g.Name] = newGroupRT(g, m.Config.Partitions)
	}
	return q
}

func newGroupRT(g groupMeta, parts int) *groupRT {
	gr := &groupRT{meta: g, slots: make([]*slot, parts)}
	for i := range gr.slots {
		gr.slots[i] = &slot{resolved: true}
	}
	return gr
}

func (q *queueRT) loadStates(txn *badger.Txn) error {
	byID := map[uint16]*groupRT{}
	for _, g := range q.groups {
		byID[g.meta.ID] = g
	}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: stateQueuePrefix(q.id), PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != stateKeyLen {
			continue
		}
		g := byID[binary.BigEndian.Uint16(k[6:])]
		part := int(binary.BigEndian.Uint16(k[8:]))
		if g == nil || part >= len(g.slots) {
			continue // a removed group's leftovers
		}
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return err
		}
		vs, err := decodeStateValue(v)
		if err != nil {
			return fmt.Errorf("badgerq: state of %s/%s/%d: %w", q.name, g.meta.Name, part, err)
		}
		g.slots[part] = &slot{versions: vs}
	}
	return nil
}

// countDepth recomputes the depth and the partition index from entry keys
// (no value reads).
func (q *queueRT) countDepth(txn *badger.Txn) error {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix(q.id)})
	defer it.Close()
	var ev, by int64
	for it.Rewind(); it.Valid(); it.Next() {
		if k, ok := decodeEntryKey(it.Item().Key()); ok && int(k.part) < len(q.index) {
			ev += int64(k.count)
			by += int64(k.size)
			q.index[k.part].raise(k.prio, k.wp, k.chunk+1)
		}
	}
	q.events.Store(ev)
	q.bytes.Store(by)
	q.usedEvents.Store(ev)
	q.usedBytes.Store(by)
	return nil
}

func (b *Backend) queue(name string) (*queueRT, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return nil, queue.ErrClosed
	}
	q := b.queues[name]
	if q == nil {
		return nil, fmt.Errorf("%w: %q", queue.ErrUnknownQueue, name)
	}
	return q, nil
}

func (b *Backend) saveMeta(name string, m *queueMeta, extra func(*badger.Txn) error) error {
	v, err := json.Marshal(m)
	if err != nil {
		return err
	}
	err = b.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(metaKey(name), v); err != nil {
			return err
		}
		if extra != nil {
			return extra(txn)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return b.sync()
}

// sync makes what was written so far durable when Options.Sync is set.
func (b *Backend) sync() error {
	if !b.opts.Sync {
		return nil
	}
	return tx.SyncBadger(b.db) // DB.Sync misses files Badger just rotated away from
}

// CreateQueue implements queue.Backend.
func (b *Backend) CreateQueue(name string, cfg queue.Config) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return queue.ErrClosed
	}
	if b.queues[name] != nil {
		return fmt.Errorf("%w: queue %q", queue.ErrExists, name)
	}
	var id uint32
	err := b.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(nextIDKey))
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			id = 1
		case err != nil:
			return err
		default:
			if err := item.Value(func(v []byte) error {
				if len(v) != 4 {
					return errCorrupt
				}
				id = binary.BigEndian.Uint32(v)
				return nil
			}); err != nil {
				return err
			}
			if id == 0 { // wrapped: ids are never reused
				return fmt.Errorf("%w: %d queues created, the most a store can have over its life", queue.ErrExhausted, uint32(math.MaxUint32))
			}
		}
		return txn.Set([]byte(nextIDKey), binary.BigEndian.AppendUint32(nil, id+1))
	})
	if err != nil {
		return err
	}
	// saveMeta below syncs both writes.
	m := queueMeta{ID: id, Config: cfg, NextGroup: 1}
	if err := b.saveMeta(name, &m, nil); err != nil {
		return err
	}
	b.queues[name] = newQueueRT(name, m)
	return nil
}

// DeleteQueue implements queue.Backend.
func (b *Backend) DeleteQueue(name string) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return queue.ErrClosed
	}
	q := b.queues[name]
	if q == nil {
		b.mu.Unlock()
		return fmt.Errorf("%w: %q", queue.ErrUnknownQueue, name)
	}
	// Marked deleted before its metadata goes: AddGroup, RemoveGroup and
	// the reassignments write the metadata under q.mu only while it is
	// not (lockQueue), else one that had looked the queue up before wrote
	// it back, over a queue created again under the name.
	q.mu.Lock()
	q.deleted = true
	q.dead.Store(true)
	q.mu.Unlock()
	// The name is free for CreateQueue (under b.mu) only once the old
	// metadata is gone: freed first, a queue created again in between had
	// its new metadata deleted here, and after a restart its entries were
	// dropped as orphans (TestDeleteQueueKeepsQueueCreatedAgain).
	err := b.db.Update(func(txn *badger.Txn) error { return txn.Delete(metaKey(name)) })
	delete(b.queues, name)
	b.mu.Unlock()
	if h := nameFreedTestHook; h != nil {
		h(name)
	}
	if err != nil {
		return err
	}
	if err := b.sync(); err != nil {
		return err
	}
	// Queue ids are never reused, so leftovers of a crash here are inert;
	// Open deletes them (dropOrphans). So does a producer or consumer whose
	// commit lands after this sweep (PostCommit: it sees dead, set above).
	err = b.dropQueueKeys(q.id)
	q.signalSpace()
	q.notify() // waiting consumers find the queue gone
	return err
}

// dropQueueKeys deletes every entry and cursor state of queue id qid.
func (b *Backend) dropQueueKeys(qid uint32) error {
	_, by, err := b.deletePrefix(queuePrefix(qid))
	b.freed.Add(by)
	if err != nil {
		return err
	}
	_, _, err = b.deletePrefix(stateQueuePrefix(qid))
	return err
}

// dropOrphans deletes, at Open, the entries and cursor states of queue ids
// that no queue has (a crash inside DeleteQueue, or a commit that landed
// after it and the process died before sweeping) and the cursor states of
// removed groups. Entry keys of live queues are skipped with one seek each.
func (b *Backend) dropOrphans() error {
	live := make(map[uint32]*queueRT, len(b.queues))
	for _, q := range b.queues {
		live[q.id] = q
	}
	wb := b.db.NewWriteBatch()
	defer wb.Cancel()
	n := 0
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(entryTag)})
		for it.Rewind(); it.Valid(); {
			k := it.Item().Key()
			if len(k) >= queuePfxLen {
				if qid := binary.BigEndian.Uint32(k[2:]); live[qid] != nil {
					if qid == ^uint32(0) {
						break
					}
					it.Seek(queuePrefix(qid + 1))
					continue
				}
			}
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				it.Close()
				return err
			}
			n++
			it.Next()
		}
		it.Close()
		it = txn.NewIterator(badger.IteratorOptions{Prefix: []byte(stateTag)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) == stateKeyLen {
				if q := live[binary.BigEndian.Uint32(k[2:])]; q != nil && q.hasGroupID(binary.BigEndian.Uint16(k[6:])) {
					continue
				}
			}
			if err := wb.Delete(it.Item().KeyCopy(nil)); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil || n == 0 {
		return err
	}
	return wb.Flush()
}

func (q *queueRT) hasGroupID(gid uint16) bool {
	for _, g := range q.meta.Groups {
		if g.ID == gid {
			return true
		}
	}
	return false
}

// TruncateQueue implements queue.Backend.
func (b *Backend) TruncateQueue(name string) error {
	q, err := b.queue(name)
	if err != nil {
		return err
	}
	// Not at the same time as an eviction pass: both would delete, and
	// subtract from the depth, the same entries (a negative depth let
	// producers past MaxEvents/MaxBytes).
	//
	// On the general path, entries of producers still in flight are stored
	// before their commit: they commit after the truncate and stay (deleting
	// them lost those events). keep is nil without a coordinator and on the
	// fast path, which stores nothing before a commit (a transaction there
	// would only cost: an abort, and a sibling that gathering waits for).
	var keep func(*entryKey, map[uint64]int) bool
	if c := b.opts.Coordinator; c != nil && !b.opts.FastPath {
		// Only its snapshot counts (nothing is written under it), so its
		// timeout does not matter, but it must be one the coordinator takes.
		t, err := c.StartShort(min(time.Minute, c.MaxTimeout()))
		if err != nil {
			return err
		}
		defer c.Abort(t)
		// And the entries of a producer whose Persist is registered when
		// the read starts (see readInFlight): not in the depth (an
		// invalidated one's Rollback, still to come, deletes them and
		// drops its reservation; deleting them here took them from the
		// depth first: below zero).
		keep = func(k *entryKey, inFlight map[uint64]int) bool {
			return inFlight[k.wp] > 0 || (!t.Visible(k.wp) && k.wp >= t.FirstInProgress())
		}
	}
	b.evictMu.Lock()
	ev, by, err := b.deleteEntries(q, queuePrefix(q.id), keep)
	b.evictMu.Unlock()
	q.removeDepth(ev, by)
	b.freed.Add(by)
	q.signalSpace()
	if err != nil {
		return err
	}
	return b.sync()
}

// deletePrefix deletes every key under prefix; for entry keys it returns the
// events and bytes deleted.
func (b *Backend) deletePrefix(prefix []byte) (events, bytes int64, err error) {
	return b.deleteEntries(nil, prefix, nil)
}

// deleteEntries is deletePrefix, except for the entry keys keep (if not
// nil) says to keep; it is given the pointers in flight when the read
// started (readInFlight). On error, the events and bytes are those of the
// entries it did delete (see keyDeleter). q, if not nil, is the queue whose
// depth they leave (its producers' staged commits learn what of them went).
func (b *Backend) deleteEntries(q *queueRT, prefix []byte, keep func(*entryKey, map[uint64]int) bool) (events, bytes int64, err error) {
	if b.db.IsClosed() {
		return 0, 0, badger.ErrDBClosed
	}
	del := keyDeleter{b: b, q: q}
	var txn *badger.Txn
	var inFlight map[uint64]int
	if keep != nil {
		txn, inFlight = b.readInFlight()
	} else {
		txn = b.db.NewTransaction(false)
	}
	err = func() error {
		defer txn.Discard()
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			if ek, ok := decodeEntryKey(k); ok && keep != nil && keep(&ek, inFlight) {
				continue
			}
			if err := del.add(k, 0); err != nil {
				return err
			}
		}
		return del.flush()
	}()
	return del.events, del.bytes, err
}

// AddGroup implements queue.Backend.
func (b *Backend) AddGroup(name string, g queue.Group) error {
	q, err := b.lockQueue(name)
	if err != nil {
		return err
	}
	defer q.mu.Unlock()
	if q.groups[g.Name] != nil {
		return fmt.Errorf("%w: group %q of queue %q", queue.ErrExists, g.Name, name)
	}
	starts, err := b.startStates(q) // start.go: where the existing groups all are
	if err != nil {
		return err
	}
	m := q.meta
	if m.NextGroup == 0 {
		// Wrapped: ids are never reused (a removed group's consumer may
		// still commit under its id; its sweep would then delete the new
		// group's states), and the next would collide with a live group.
		return fmt.Errorf("%w: queue %q has had %d groups added, the most a queue can have over its life (remove the queue to start again)",
			queue.ErrExhausted, name, math.MaxUint16)
	}
	gm := groupMeta{ID: m.NextGroup, Group: g}
	m.Groups = append(append([]groupMeta(nil), m.Groups...), gm)
	m.NextGroup++
	// The start states land with the group, in one write; version 0 is
	// visible to every transaction.
	err = b.saveMeta(name, &m, func(txn *badger.Txn) error {
		for p, st := range starts {
			if st != nil {
				if err := txn.Set(stateKey(q.id, gm.ID, uint16(p)), encodeStateValue(stateVersion{st: *st})); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	q.meta = m
	gr := newGroupRT(gm, q.cfg.Partitions)
	for p, st := range starts {
		if st != nil {
			gr.slots[p].committed = stateVersion{st: *st}
		}
	}
	q.groups[g.Name] = gr
	return nil
}

// RemoveGroup implements queue.Backend.
func (b *Backend) RemoveGroup(name, group string) error {
	q, err := b.lockQueue(name)
	if err != nil {
		return err
	}
	g := q.groups[group]
	if g == nil {
		q.mu.Unlock()
		return fmt.Errorf("%w: %q of queue %q", queue.ErrUnknownGroup, group, name)
	}
	m := q.meta
	m.Groups = nil
	for _, gm := range q.meta.Groups {
		if gm.Name != group {
			m.Groups = append(m.Groups, gm)
		}
	}
	if err := b.saveMeta(name, &m, nil); err != nil {
		q.mu.Unlock()
		return err
	}
	q.meta = m
	delete(q.groups, group)
	q.mu.Unlock()
	q.notify() // its waiting consumers find the group gone
	_, _, err = b.deletePrefix(stateGroupPrefix(q.id, g.meta.ID))
	b.Kick()
	return err
}

// Rescale implements queue.Backend. Only the instance count changes: each
// partition's cursor is per partition, and a partition is read by at most one
// transaction at a time, so the new owner of a partition starts exactly where
// the old owner's last committed transaction left it.
func (b *Backend) Rescale(name, group string, instances int) error {
	return b.reassign(name, group, func(g *queue.Group) { g.Instances = instances })
}

// SetStrategy implements queue.Backend. Like Rescale, only the assignment of
// partitions to instances changes (consumer.go's partitions): the cursors
// are per partition.
func (b *Backend) SetStrategy(name, group string, s queue.Strategy) error {
	return b.reassign(name, group, func(g *queue.Group) { g.Strategy = s })
}

// reassign applies change to a group's stored and live metadata and wakes
// the consumers: its partitions may have changed owners.
func (b *Backend) reassign(name, group string, change func(*queue.Group)) error {
	q, err := b.lockQueue(name)
	if err != nil {
		return err
	}
	defer q.mu.Unlock()
	g := q.groups[group]
	if g == nil {
		return fmt.Errorf("%w: %q of queue %q", queue.ErrUnknownGroup, group, name)
	}
	m := q.meta
	m.Groups = append([]groupMeta(nil), m.Groups...)
	for i := range m.Groups {
		if m.Groups[i].Name == group {
			change(&m.Groups[i].Group)
		}
	}
	if err := b.saveMeta(name, &m, nil); err != nil {
		return err
	}
	q.meta = m
	change(&g.meta.Group)
	q.notify()
	return nil
}

// Maintain implements queue.Backend: one eviction pass, then a reclaim
// (reclaim.go: memtable flush, LSM compaction, value-log GC) whatever was
// freed. The background loop does the same on its own once ReclaimBytes
// were freed.
func (b *Backend) Maintain() error {
	if err := b.evict(); err != nil {
		return err
	}
	_, err := b.reclaim()
	return err
}

// Kick asks for an eviction pass soon.
func (b *Backend) Kick() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *Backend) background() {
	defer b.wg.Done()
	var evictC, gcC <-chan time.Time
	if b.opts.EvictInterval > 0 {
		t := time.NewTicker(b.opts.EvictInterval)
		defer t.Stop()
		evictC = t.C
	}
	if b.opts.GCInterval > 0 {
		t := time.NewTicker(b.opts.GCInterval)
		defer t.Stop()
		gcC = t.C
	}
	var lastProduced int64 // producers' bytes at the last eviction tick
	for {
		select {
		case <-b.stop:
			return
		case <-evictC:
			_ = b.evict() // retried next tick; errors here mean the DB is closing
			b.wakeLeaseWaiters()
			produced := b.produced.Load()
			if quiet := produced == lastProduced; b.reclaimDue() {
				b.goReclaim(func() { _ = b.reclaimNow(quiet) })
			}
			lastProduced = produced
		case <-b.kick:
			_ = b.evict()
		case <-gcC:
			// Whatever was freed since the last reclaim (a trickle never
			// reaches ReclaimBytes) is reclaimed here; otherwise just GC.
			// A few more reclaims follow on later ticks: a pass can find
			// Badger's discard statistics not yet up to date (or versions
			// still held by a reader) and rewrite nothing, and without new
			// evictions nothing would ever try again.
			b.goReclaim(func() {
				switch {
				case b.opts.ReclaimBytes > 0 && b.freed.Load() > b.reclaimedAt.Load():
					_, _ = b.reclaim()
					b.followUps.Store(3)
				case b.followUps.Load() > 0:
					b.followUps.Add(-1)
					_, _ = b.reclaim()
				default:
					_, _ = b.gc()
				}
			})
		}
	}
}

// wakeLeaseWaiters wakes the consumers of a queue where a Dequeue skipped a
// leased partition, once the lease's transaction ended and nothing of it is
// under way (a timeout, a lost PostCommit): they take the lease over
// (leaseEndLocked; a committed, unpublished one once PostCommitWait has
// passed). Nothing else would wake them if no producer commits. Needs
// Options.Coordinator.
func (b *Backend) wakeLeaseWaiters() {
	coord := b.opts.Coordinator
	if coord == nil {
		return
	}
	var inProgress []uint64
	fetched := false
	for _, q := range b.queueList() {
		if !q.leaseWait.Swap(false) {
			continue
		}
		if !fetched {
			inProgress, fetched = coord.InProgress(), true
		}
		ended, held := false, false
		now := b.opts.Now()
		q.mu.Lock()
		for _, g := range q.groups {
			for _, s := range g.slots {
				if s.owner == nil || !s.skipped {
					continue // nobody waits for it
				}
				_, running := slices.BinarySearch(inProgress, s.ownerTx)
				switch leaseEndLocked(s, !running) {
				case leaseEnded:
					ended = true
				case leaseEndedWrote:
					// The skipper found it committed, unpublished.
					if s.unpublished.IsZero() || now.Sub(s.unpublished) >= b.opts.PostCommitWait {
						ended = true
					} else {
						held = true
					}
				default:
					held = true
				}
			}
		}
		q.mu.Unlock()
		if ended {
			q.notify()
		} else if held {
			q.leaseWait.Store(true) // still held: look again next tick
		}
	}
}

// goReclaim runs a reclaim or GC of the background loop on a goroutine of
// its own, unless one still runs (the next tick tries again). Run in the
// loop, a reclaim (filler writes for up to flushWait, Flatten, value-log GC:
// seconds, more under load) held every eviction pass until it ended, and
// producers waiting for room in a bounded queue got none however much was
// consumed: under load they waited out FullWait (TestEvictionRunsDuringReclaim).
func (b *Backend) goReclaim(job func()) {
	if !b.reclaiming.CompareAndSwap(false, true) {
		return
	}
	b.wg.Add(1) // the loop is counted: Close's Wait has not returned
	go func() {
		defer b.wg.Done()
		defer b.reclaiming.Store(false)
		job()
	}()
}

// Close stops background work. It does not close the DB.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.shut.Store(true)
	b.mu.Unlock()
	close(b.stop)
	b.wg.Wait()
	for _, q := range b.queueList() {
		q.notify()      // waiting consumers find the backend closed
		q.signalSpace() // so do producers waiting for room (nothing evicts any more)
	}
	if b.pruner != nil {
		b.pruner.Unregister()
	}
	return nil
}

func (b *Backend) queueList() []*queueRT {
	b.mu.RLock()
	defer b.mu.RUnlock()
	qs := make([]*queueRT, 0, len(b.queues))
	for _, q := range b.queues {
		qs = append(qs, q)
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].name < qs[j].name })
	return qs
}

// signalSpace wakes producers waiting for depth to shrink.
func (q *queueRT) signalSpace() {
	q.spaceMu.Lock()
	q.wakeLocked()
	q.spaceMu.Unlock()
}

// wakeLocked wakes every producer waiting for room. Under spaceMu.
func (q *queueRT) wakeLocked() {
	close(q.space)
	q.space = make(chan struct{})
}

// nameFreedTestHook, if set, runs in DeleteQueue once the name is free
// for CreateQueue (tests: to create the queue again there).
var nameFreedTestHook func(name string)

// lockQueueTestHook, if set, runs in lockQueue between the lookup and the
// lock (tests: to delete the queue there).
var lockQueueTestHook func(name string)

// lockQueue returns queue name with its lock held, for a change of its
// metadata: ErrUnknownQueue if DeleteQueue marked it deleted after the
// lookup (it may have been created again under the name since; writing the
// deleted queue's metadata replaced the new one's:
// TestAdminOfDeletedQueueLeavesQueueCreatedAgain).
func (b *Backend) lockQueue(name string) (*queueRT, error) {
	q, err := b.queue(name)
	if err != nil {
		return nil, err
	}
	if h := lockQueueTestHook; h != nil {
		h(name)
	}
	q.mu.Lock()
	if q.deleted {
		q.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", queue.ErrUnknownQueue, name)
	}
	return q, nil
}
