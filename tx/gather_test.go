package tx

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// gatherRig is a coordinator on a syncing BadgerLog that counts its syncs,
// after a first commit (which reserves write pointers and measures a sync).
type gatherRig struct {
	l     *BadgerLog
	c     *Coordinator
	syncs atomic.Int64
	// warmSyncs: Stats().LogSyncs after the first commit
	warmSyncs uint64
}

func newGatherRig(t *testing.T, limit time.Duration) *gatherRig {
	t.Helper()
	l, c := openSyncedLog(t, openBadger(t, t.TempDir(), false))
	t.Cleanup(func() { c.Close() })
	r := &gatherRig{l: l, c: c}
	r.commit(t, r.start(t), "warm-up")
	r.warmSyncs = c.Stats().LogSyncs
	l.smu.Lock()
	l.gatherFor = limit
	l.smu.Unlock()
	l.syncer.synced = func([]string) { r.syncs.Add(1) }
	return r
}

func (r *gatherRig) start(t *testing.T) *Tx {
	t.Helper()
	tx, err := r.c.StartShort(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

func (r *gatherRig) commit(t *testing.T, tx *Tx, key string) {
	t.Helper()
	if err := r.c.CommitWith(tx, [][]byte{[]byte(key)}, []Write{{Key: []byte("k/" + key), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
}

// commitGathering commits tx in a goroutine and waits until its sync's leader
// is holding the sync back for siblings.
func (r *gatherRig) commitGathering(t *testing.T, tx *Tx, key string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	held := r.stats().held
	go func() {
		done <- r.c.CommitWith(tx, [][]byte{[]byte(key)}, []Write{{Key: []byte("k/" + key), Value: []byte("v")}})
	}()
	// The count too, not only the flag: a poll that comes late (a loaded
	// machine) would miss a short gather and wait out the deadline.
	for deadline := time.Now().Add(30 * time.Second); !r.l.gathering.Load() && r.stats().held == held; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the commit's sync never waited for its in-progress sibling")
		}
	}
	return done
}

func (r *gatherRig) stats() gatherStats {
	r.l.smu.Lock()
	defer r.l.smu.Unlock()
	return r.l.gathers
}

func waitCommit(t *testing.T, done <-chan error, why string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the gathering commit did not return after %s", why)
	}
}

// A commit whose sibling is still in progress holds its sync back for it,
// and the two share one sync (group commit alone syncs twice: the second
// write lands while the first's sync runs).
func TestGatherSharesOneSync(t *testing.T) {
	r := newGatherRig(t, time.Minute) // only an arrival can end the gather
	a, b := r.start(t), r.start(t)
	done := r.commitGathering(t, a, "a")
	r.commit(t, b, "b")
	waitCommit(t, done, "its sibling committed")
	if got := r.syncs.Load(); got != 1 {
		t.Fatalf("two commits gathered: %d syncs, want 1", got)
	}
	if st := r.stats(); st != (gatherStats{held: 1, joined: 1}) {
		t.Fatalf("gather stats %+v, want one held and joined, none expired", st)
	}
	if s := r.c.Stats(); s.LogSyncs != r.warmSyncs+1 || s.LogGathers != 1 || s.LogGathersJoined != 1 {
		t.Fatalf("Stats: %d log syncs (want %d), %d gathers, %d joined (want 1, 1)", s.LogSyncs, r.warmSyncs+1, s.LogGathers, s.LogGathersJoined)
	}
}

// A sibling that aborts is no longer waited for.
func TestGatherEndsWhenSiblingAborts(t *testing.T) {
	r := newGatherRig(t, time.Minute)
	a, b := r.start(t), r.start(t)
	done := r.commitGathering(t, a, "a")
	if err := r.c.Abort(b); err != nil {
		t.Fatal(err)
	}
	waitCommit(t, done, "its only sibling aborted")
	if st := r.stats(); st != (gatherStats{held: 1}) {
		t.Fatalf("gather stats %+v, want one held, not joined, not expired", st)
	}
}

// An append made under the coordinator's lock (a long transaction's
// checkpoint) must not wait for siblings, which need that lock to commit.
func TestGatherEndsForImpatientAppend(t *testing.T) {
	r := newGatherRig(t, time.Minute)
	a, b := r.start(t), r.start(t)
	long, err := r.c.StartLong()
	if err != nil {
		t.Fatal(err)
	}
	done := r.commitGathering(t, a, "a")
	checkpointed := make(chan error, 1)
	go func() {
		_, err := r.c.Checkpoint(long)
		checkpointed <- err
	}()
	waitCommit(t, done, "an impatient append arrived")
	waitCommit(t, checkpointed, "an impatient append arrived")
	if st := r.stats(); st.expired != 0 || st.joined != 0 {
		t.Fatalf("gather stats %+v: want it ended by the impatient append, not expired, and not counted as joined by it", st)
	}
	if err := r.c.Abort(b); err != nil {
		t.Fatal(err)
	}
}

// Gathers that nobody joins (a sibling that sits idle) cost their leader up
// to the limit; after fruitlessLimit of them the log stops gathering for
// skipAfterFruitless syncs.
func TestGatherBacksOffWhenNobodyJoins(t *testing.T) {
	r := newGatherRig(t, time.Millisecond)
	idle := r.start(t)
	defer r.c.Abort(idle)
	for i := range fruitlessLimit {
		r.commit(t, r.start(t), "a")
		if st := r.stats(); st != (gatherStats{held: uint64(i + 1), expired: uint64(i + 1)}) {
			t.Fatalf("after %d commits with an idle sibling: gather stats %+v, want every one held and expired", i+1, st)
		}
	}
	for range skipAfterFruitless {
		r.commit(t, r.start(t), "a")
	}
	if st := r.stats(); st.held != fruitlessLimit {
		t.Fatalf("gathers after %d fruitless ones: %d held, want none", fruitlessLimit, st.held-fruitlessLimit)
	}
	r.commit(t, r.start(t), "a")
	if st := r.stats(); st.held != fruitlessLimit+1 {
		t.Fatalf("after the back-off: gather stats %+v, want one more held", st)
	}
}

// With many transactions in progress the log does not gather: group
// commit fills each sync with what arrived during the last one, and waiting
// for the last of many stretches every cycle.
func TestNoGatherForManySiblings(t *testing.T) {
	r := newGatherRig(t, time.Millisecond)
	var idle []*Tx
	for range maxGatherSiblings {
		idle = append(idle, r.start(t))
	}
	r.commit(t, r.start(t), "a")
	if st := r.stats(); st.held != 1 {
		t.Fatalf("with %d siblings: gather stats %+v, want one held", maxGatherSiblings, st)
	}
	idle = append(idle, r.start(t))
	r.commit(t, r.start(t), "b")
	if st := r.stats(); st.held != 1 {
		t.Fatalf("with %d siblings: gather stats %+v, want no more held", maxGatherSiblings+1, st)
	}
	for _, tx := range idle {
		if err := r.c.Abort(tx); err != nil {
			t.Fatal(err)
		}
	}
}

// A sibling that sits idle keeps the count above 0, so gathers run out of
// time even when other commits join them: those count against gathering
// too, or one idle transaction would slow every sync for good.
func TestGatherBacksOffWhenIdleSiblingHoldsIt(t *testing.T) {
	// Long enough for b to join each gather (the leader is polled for).
	r := newGatherRig(t, 50*time.Millisecond)
	idle := r.start(t)
	defer r.c.Abort(idle)
	for round := 1; r.stats().held < fruitlessLimit; round++ {
		a, b := r.start(t), r.start(t)
		done := r.commitGathering(t, a, "a")
		r.commit(t, b, "b")
		waitCommit(t, done, "its time ran out")
		if st := r.stats(); st.expired != st.held {
			t.Fatalf("round %d: gather stats %+v, want every gather expired (the idle sibling)", round, st)
		}
	}
	if st := r.stats(); st.joined == 0 { // b joins unless the machine stalls it for the whole limit
		t.Fatalf("gather stats %+v: no commit joined a gather", st)
	}
	held := r.stats().held
	for range 4 {
		r.commit(t, r.start(t), "c")
	}
	if st := r.stats(); st.held != held {
		t.Fatalf("after %d expired gathers: gather stats %+v, want no more held", held, st)
	}
}

// A snapshot waits for the coordinator's gate, which a gathering leader
// holds shared and its siblings need: it ends the gather instead of
// waiting out its time.
func TestSnapshotEndsGather(t *testing.T) {
	r := newGatherRig(t, time.Minute)
	a, b := r.start(t), r.start(t)
	done := r.commitGathering(t, a, "a")
	snapped := make(chan error, 1)
	go func() { snapped <- r.c.Snapshot() }()
	waitCommit(t, done, "a snapshot asked for the gate")
	waitCommit(t, snapped, "the gather ended")
	if st := r.stats(); st.expired != 0 {
		t.Fatalf("gather stats %+v: the gather ran out its time with a snapshot waiting", st)
	}
	r.commit(t, b, "b") // and gathering works again after it
}

// A sibling whose write the store refuses (too large) wakes the gathering
// leader: it no longer counts and will not write.
func TestGatherWokenByRefusedWrite(t *testing.T) {
	r := newGatherRig(t, time.Minute)
	a, b := r.start(t), r.start(t)
	done := r.commitGathering(t, a, "a")
	huge := make([]Write, 100000) // small values stay in the LSM and count
	for i := range huge {
		huge[i] = Write{Key: binary.BigEndian.AppendUint64([]byte("k/"), uint64(i)), Value: make([]byte, 100)}
	}
	if err := r.c.CommitWith(b, nil, huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized commit = %v, want ErrTooLarge", err)
	}
	waitCommit(t, done, "its only sibling's write was refused")
	if st := r.stats(); st.expired != 0 {
		t.Fatalf("gather stats %+v: the gather ran out its time after the refused write", st)
	}
	r.c.Abort(b)
}

// A gather lasts through a sibling's write in flight: the coordinator stops
// counting a sibling when its write begins, and a wake-up that comes before
// the write lands (another sibling's, say) must not end the gather while it
// is still on its way.
func TestGatherWaitsForWriteInFlight(t *testing.T) {
	db := openBadger(t, t.TempDir(), false)
	defer db.Close()
	l, err := NewBadgerLog(db, BadgerLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	var count atomic.Int64 // the coordinator's sibling count, played by the test
	if !l.watchSiblings(count.Load) {
		t.Fatal("a syncing BadgerLog does not gather")
	}
	edit := func(id uint64) []Edit { return []Edit{{Kind: EditAborted, TxID: id}} }
	if err := l.Append(&Batch{Edits: edit(1), Wait: true}); err != nil { // measures a sync
		t.Fatal(err)
	}
	l.smu.Lock()
	l.gatherFor = time.Minute
	l.smu.Unlock()
	var syncs atomic.Int64
	l.syncer.synced = func([]string) { syncs.Add(1) }

	count.Store(1)
	leader := make(chan error, 1)
	go func() { leader <- l.Append(&Batch{Edits: edit(2), Wait: true, patient: true}) }()
	for deadline := time.Now().Add(30 * time.Second); !l.gathering.Load(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the leader never gathered for its sibling")
		}
	}
	// The sibling begins its write, as the coordinator hands it over...
	l.siblingWriting()
	count.Add(-1)
	l.wakeGatherer() // ...and something wakes the leader before it lands.
	select {
	case err := <-leader:
		t.Fatalf("the leader synced (%v) while its sibling's write was in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	if err := l.Append(&Batch{Edits: edit(3), Wait: true, patient: true, sibling: true}); err != nil {
		t.Fatal(err)
	}
	waitCommit(t, leader, "its sibling's write landed")
	if got := syncs.Load(); got != 1 {
		t.Fatalf("leader and sibling: %d syncs, want 1", got)
	}
	if l.writing.Load() != 0 {
		t.Fatalf("%d sibling writes still in flight after they landed", l.writing.Load())
	}
}

// Every back-off after the first runs twice as long, up to 32 times.
func TestGatherBackOffDoubles(t *testing.T) {
	r := newGatherRig(t, time.Millisecond)
	idle := r.start(t)
	defer r.c.Abort(idle)
	held := uint64(0)
	for round, skip := range []int{skipAfterFruitless, 2 * skipAfterFruitless} {
		for range fruitlessLimit {
			r.commit(t, r.start(t), "a")
		}
		held += fruitlessLimit
		for range skip {
			r.commit(t, r.start(t), "a")
		}
		if st := r.stats(); st.held != held {
			t.Fatalf("back-off %d: gather stats %+v, want %d held: %d syncs skipped", round+1, st, held, skip)
		}
	}
	r.commit(t, r.start(t), "a")
	if st := r.stats(); st.held != held+1 {
		t.Fatalf("after the second back-off: gather stats %+v, want one more held", st)
	}
}

// BadgerLogOptions.NoGather: the coordinator counts no siblings and a
// commit syncs at once, whoever else is in progress.
func TestNoGatherOption(t *testing.T) {
	l, c := openLogWith(t, openBadger(t, t.TempDir(), false), BadgerLogOptions{Sync: true, NoGather: true})
	defer c.Close()
	r := &gatherRig{l: l, c: c}
	r.commit(t, r.start(t), "warm-up")
	idle := r.start(t)
	for range 3 {
		r.commit(t, r.start(t), "a")
	}
	if s := c.Stats(); s.LogGathers != 0 || c.siblings.Load() != 0 || c.watcher != nil {
		t.Fatalf("NoGather: %d gathers, %d siblings counted, watcher %v; want none", s.LogGathers, c.siblings.Load(), c.watcher)
	}
	if s := c.Stats(); s.LogSyncs < 4 {
		t.Fatalf("NoGather: %d log syncs for 4 commits, want one each", s.LogSyncs)
	}
	c.Abort(idle)
}
