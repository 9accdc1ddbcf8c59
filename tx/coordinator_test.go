package tx

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestVisibility(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	t1 := start(c.StartShort(time.Minute))
	t2 := start(c.StartShort(time.Minute))
	if err := c.Commit(t2); err != nil {
		t.Fatal(err)
	}
	t3 := start(c.StartShort(time.Minute))
	if !t3.Visible(t2.WritePointer) {
		t.Error("t3 must see t2, committed before t3 started")
	}
	if t3.Visible(t1.WritePointer) {
		t.Error("t3 must not see t1, in progress when t3 started")
	}
	if t1.Visible(t2.WritePointer) {
		t.Error("t1 must not see t2, which committed after t1 started")
	}
	if !t1.Visible(t1.WritePointer) || !t3.Visible(t3.ID) {
		t.Error("a transaction sees its own writes")
	}
	if t3.Visible(t3.ID + 1) {
		t.Error("future versions are invisible")
	}
	if got := t3.InProgress(); !slices.Equal(got, []uint64{t1.ID}) {
		t.Errorf("t3.InProgress() = %v, want [%d]", got, t1.ID)
	}
	if t3.FirstInProgress() != t1.ID {
		t.Errorf("FirstInProgress = %d, want %d", t3.FirstInProgress(), t1.ID)
	}
	// t1 commits: later snapshots see it, earlier ones still do not.
	if err := c.Commit(t1); err != nil {
		t.Fatal(err)
	}
	t4 := start(c.StartShort(time.Minute))
	if !t4.Visible(t1.ID) || t3.Visible(t1.ID) {
		t.Error("t1 must be visible to t4 only")
	}
}

func TestSnapshotIsSharedUntilSomethingChanges(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	a := start(c.StartShort(time.Minute))
	b := start(c.StartShort(time.Minute))
	if a.snap != b.snap {
		t.Error("transactions started with no commit in between must share one snapshot")
	}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	d := start(c.StartShort(time.Minute))
	if d.snap == b.snap {
		t.Error("a commit must produce a new snapshot")
	}
}

func TestConflictWindow(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	x := [][]byte{[]byte("x")}
	a := start(c.StartShort(time.Minute))
	b := start(c.StartShort(time.Minute))
	if err := c.CanCommit(a, x); err != nil {
		t.Fatal(err)
	}
	// b overlaps a while a is committing.
	var ce *ConflictError
	if err := c.CanCommit(b, x); !errors.As(err, &ce) || !ce.Pending {
		t.Fatalf("CanCommit(b) = %v, want a pending conflict", err)
	}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	// b started before a committed: conflict.
	if err := c.CanCommit(b, x); !errors.Is(err, ErrConflict) {
		t.Fatalf("CanCommit(b) after a committed = %v, want ErrConflict", err)
	}
	// Disjoint keys do not conflict.
	if err := c.CanCommit(b, [][]byte{[]byte("y")}); err != nil {
		t.Fatalf("disjoint keys: %v", err)
	}
	if err := c.Abort(b); err != nil {
		t.Fatal(err)
	}
	// A transaction that started after a committed does not conflict with it.
	d := start(c.StartShort(time.Minute))
	if err := c.CanCommit(d, x); err != nil {
		t.Fatalf("d started after a's commit: %v", err)
	}
	if err := c.Commit(d); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.Conflicts != 2 || s.Committed != 2 || s.Aborted != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// A transaction that starts while another is writing its commit record must
// conflict with it: it could not see that commit's writes.
func TestConflictWithCommitInFlight(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	x := [][]byte{[]byte("x")}
	a := start(c.StartShort(time.Minute))
	c.mu.Lock()
	st := c.inProgress[a.ID]
	must[[]uint64](t)(c.hashKeys(x))
	keys, _ := c.hashKeys(x)
	if err := c.reserveKeysLocked(st, keys); err != nil {
		t.Fatal(err)
	}
	st.finalizing = true // a's commit record is being written
	c.mu.Unlock()
	b := start(c.StartShort(time.Minute))
	if b.Visible(a.ID) {
		t.Fatal("a is not committed yet")
	}
	c.mu.Lock()
	c.finishLocked(st)
	c.conflicts.commit(st.id, st.keys)
	c.mu.Unlock()
	if err := c.CanCommit(b, x); !errors.Is(err, ErrConflict) {
		t.Fatalf("b = %v, want ErrConflict", err)
	}
}

func TestTimeoutInvalidates(t *testing.T) {
	clk := newFakeClock()
	c := mustOpen(t, Options{Now: clk.Now})
	start := must[*Tx](t)
	a := start(c.StartShort(time.Second))
	b := start(c.StartShort(time.Minute))
	clk.Advance(2 * time.Second)
	if err := c.Commit(a); !errors.Is(err, ErrNotInProgress) {
		t.Fatalf("late commit = %v, want ErrNotInProgress", err)
	}
	if !slices.Contains(c.InvalidList(), a.ID) {
		t.Fatal("a timed-out transaction must be invalid")
	}
	if err := c.Commit(b); err != nil {
		t.Fatalf("b has not timed out: %v", err)
	}
	d := start(c.StartShort(time.Second))
	if d.Visible(a.ID) {
		t.Error("an invalid version must stay invisible")
	}
	// The sweeper path.
	e := start(c.StartShort(time.Second))
	clk.Advance(2 * time.Second)
	if n := c.ExpireTimedOut(); n != 2 { // d and e
		t.Fatalf("ExpireTimedOut = %d, want 2", n)
	}
	if err := c.CanCommit(e, nil); !errors.Is(err, ErrNotInProgress) {
		t.Fatalf("CanCommit after expiry = %v", err)
	}
	s := c.Stats()
	if s.TimedOut != 3 || s.Invalid != 3 || s.InProgress != 0 {
		t.Errorf("stats = %+v", s)
	}
}

// The background sweeper parks while nothing is in progress (an idle
// process does not wake for it) and the next start wakes it: that
// transaction still times out without anyone calling ExpireTimedOut.
func TestSweeperParksAndWakes(t *testing.T) {
	clk := newFakeClock()
	c := mustOpen(t, Options{Now: clk.Now, ExpiryInterval: time.Millisecond})
	parked := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.sweepParked
	}
	deadline := time.Now().Add(10 * time.Second)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("the sweeper did not park with nothing in progress", parked)
	a := must[*Tx](t)(c.StartShort(time.Second))
	if parked() {
		t.Fatal("a start left the sweeper parked")
	}
	clk.Advance(2 * time.Second)
	waitFor("the woken sweeper did not expire a timed-out transaction", func() bool { return c.Stats().TimedOut == 1 })
	if err := c.Commit(a); !errors.Is(err, ErrNotInProgress) {
		t.Fatalf("commit after the sweeper expired it = %v, want ErrNotInProgress", err)
	}
	waitFor("the sweeper did not park again", parked)
}

func TestInvalidateAndPrune(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	a := start(c.StartShort(time.Minute))
	b := start(c.StartShort(time.Minute))
	if err := c.Invalidate(a); err != nil {
		t.Fatal(err)
	}
	if err := c.Invalidate(b); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(a); !errors.Is(err, ErrNotInProgress) {
		t.Fatalf("commit of invalidated tx = %v", err)
	}
	if got := c.InvalidList(); !slices.Equal(got, []uint64{a.ID, b.ID}) {
		t.Fatalf("invalid = %v", got)
	}
	d := start(c.StartShort(time.Minute))
	if d.Visible(a.ID) || d.Visible(b.ID) {
		t.Fatal("invalid versions are invisible")
	}
	// No pruner: nothing is pruned. Two pruners: the smaller bound wins.
	c.pruneInvalid()
	if len(c.InvalidList()) != 2 {
		t.Fatal("pruned without any reporter")
	}
	p1, p2 := c.RegisterPruner("queue"), c.RegisterPruner("state")
	p1.Report(b.ID + 1)
	if len(c.InvalidList()) != 2 {
		t.Fatal("pruned before every reporter reported")
	}
	p2.Report(b.ID) // state still may hold b's data
	if got := c.InvalidList(); !slices.Equal(got, []uint64{b.ID}) {
		t.Fatalf("invalid after prune = %v, want [%d]", got, b.ID)
	}
	p2.Report(NoInvalidData)
	if got := c.InvalidList(); len(got) != 0 {
		t.Fatalf("invalid after full prune = %v", got)
	}
	if !start(c.StartShort(time.Minute)).Visible(a.ID) {
		t.Error("a pruned pointer holds no data and reads as settled")
	}
}

func TestCommittedKeysArePruned(t *testing.T) {
	c := mustOpen(t, Options{})
	c.conflicts = newConflictIndexSized(1000) // generations of 1000 keys
	start := must[*Tx](t)
	commitKey := func(i int) {
		tx := start(c.StartShort(time.Minute))
		if err := c.CanCommit(tx, [][]byte{{byte(i), byte(i >> 8), byte(i >> 16)}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Commit(tx); err != nil {
			t.Fatal(err)
		}
	}
	old := start(c.StartShort(time.Minute)) // holds the window open
	for i := 0; i < 5000; i++ {
		commitKey(i)
	}
	if n := c.Stats().ConflictKeys; n != 5000 {
		t.Fatalf("with an old tx in progress every key must be kept: %d", n)
	}
	// The old transaction still conflicts with the first of them, and with
	// one from the generation taking commits.
	for _, k := range [][]byte{{0, 0, 0}, {0x87, 0x13, 0}} {
		if err := c.CanCommit(old, [][]byte{k}); !errors.Is(err, ErrConflict) {
			t.Fatalf("old tx, key %v = %v, want ErrConflict", k, err)
		}
	}
	// A transaction started now conflicts with none of them.
	young := start(c.StartShort(time.Minute))
	if err := c.CanCommit(young, [][]byte{{0, 0, 0}, {0x87, 0x13, 0}}); err != nil {
		t.Fatalf("young tx: %v", err)
	}
	if err := c.Abort(young); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(old); err != nil {
		t.Fatal(err)
	}
	for i := 5000; i < 10000; i++ {
		commitKey(i)
	}
	if n := c.Stats().ConflictKeys; n > 1000 {
		t.Fatalf("with no old tx the index must have been pruned to one generation: %d keys kept", n)
	}
}

// A hold released by an abort restores what other transactions see: the
// committed key still conflicts with those that started before its commit.
func TestAbortKeepsCommittedKey(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	x := [][]byte{[]byte("x")}
	early := start(c.StartShort(time.Minute))
	a := start(c.StartShort(time.Minute))
	if err := c.CanCommit(a, x); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(a); err != nil {
		t.Fatal(err)
	}
	b := start(c.StartShort(time.Minute))
	if err := c.CanCommit(b, x); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(b); err != nil {
		t.Fatal(err)
	}
	if err := c.CanCommit(early, x); !errors.Is(err, ErrConflict) {
		t.Fatalf("early tx after b's abort = %v, want ErrConflict", err)
	}
	d := start(c.StartShort(time.Minute))
	if err := c.CanCommit(d, x); err != nil {
		t.Fatalf("d after b's abort: %v", err)
	}
}

func TestCheckpoint(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	long := start(c.StartLong())
	other := start(c.StartShort(time.Minute))
	if err := c.Commit(other); err != nil {
		t.Fatal(err)
	}
	cp, err := c.Checkpoint(long)
	if err != nil {
		t.Fatal(err)
	}
	if cp.WritePointer <= long.WritePointer || cp.ID != long.ID {
		t.Fatalf("checkpoint = %v", cp)
	}
	if cp.ReadPointer() != long.ReadPointer() || cp.Visible(other.ID) {
		t.Fatal("a checkpoint keeps the read snapshot")
	}
	if !cp.Visible(long.ID) || !cp.Visible(cp.WritePointer) || cp.VisibleExcludingCurrent(cp.WritePointer) {
		t.Fatal("own checkpoints are visible; the current one is hidden on request")
	}
	// A transaction started after the checkpoint must not see it.
	after := start(c.StartShort(time.Minute))
	if err := c.Commit(after); err != nil {
		t.Fatal(err)
	}
	later := start(c.StartShort(time.Minute))
	if later.Visible(cp.WritePointer) || later.Visible(long.ID) {
		t.Fatal("an uncommitted checkpoint is invisible")
	}
	if err := c.Commit(cp); err != nil {
		t.Fatal(err)
	}
	last := start(c.StartShort(time.Minute))
	if !last.Visible(cp.WritePointer) || !last.Visible(long.ID) {
		t.Fatal("every pointer of a committed long tx is visible")
	}
	// Aborting a long transaction invalidates all its pointers.
	l2 := start(c.StartLong())
	l2cp, _ := c.Checkpoint(l2)
	if err := c.Abort(l2cp); err != nil {
		t.Fatal(err)
	}
	if got := c.InvalidList(); !slices.Equal(got, []uint64{l2.ID, l2cp.WritePointer}) {
		t.Fatalf("invalid = %v", got)
	}
}

func TestBadInput(t *testing.T) {
	c := mustOpen(t, Options{MaxChangeKeys: 3, MaxChangeBytes: 10})
	before := c.Stats()
	for _, d := range []time.Duration{0, -time.Second, 2 * time.Hour, 1 << 62} {
		if _, err := c.StartShort(d); !errors.Is(err, ErrInvalidTimeout) {
			t.Errorf("StartShort(%v) = %v, want ErrInvalidTimeout", d, err)
		}
	}
	if s := c.Stats(); s.Started != before.Started || s.NextPointer != before.NextPointer {
		t.Error("a refused start must change nothing")
	}
	unknown := &Tx{ID: 12345, WritePointer: 12345, snap: &snapshot{invalid: emptyInvalid}}
	for name, f := range map[string]func(*Tx) error{
		"commit":     c.Commit,
		"abort":      c.Abort,
		"invalidate": c.Invalidate,
		"cancommit":  func(tx *Tx) error { return c.CanCommit(tx, nil) },
		"checkpoint": func(tx *Tx) error { _, err := c.Checkpoint(tx); return err },
	} {
		if err := f(unknown); !errors.Is(err, ErrNotInProgress) {
			t.Errorf("%s(unknown) = %v", name, err)
		}
		if err := f(nil); !errors.Is(err, ErrNotInProgress) {
			t.Errorf("%s(nil) = %v", name, err)
		}
	}
	tx := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.CanCommit(tx, [][]byte{{1}, {2}, {3}, {4}}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("4 keys over a limit of 3: %v", err)
	}
	if err := c.CanCommit(tx, [][]byte{make([]byte, 11)}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("11 bytes over a limit of 10: %v", err)
	}
	if s := c.Stats(); s.InProgress != 1 || s.ConflictKeys != 0 {
		t.Errorf("a refused CanCommit must leave the tx as it was: %+v", s)
	}
	if err := c.Commit(tx); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(tx); !errors.Is(err, ErrNotInProgress) {
		t.Errorf("second commit = %v", err)
	}
	if err := c.Abort(tx); !errors.Is(err, ErrNotInProgress) {
		t.Errorf("abort after commit = %v", err)
	}
	rp := c.ReadPointer()
	aborted := must[*Tx](t)(c.StartShort(time.Minute))
	c.Abort(aborted)
	if err := c.Commit(aborted); !errors.Is(err, ErrNotInProgress) {
		t.Errorf("commit after abort = %v", err)
	}
	if c.ReadPointer() < rp {
		t.Error("read pointer went back")
	}
	c.Close()
	if _, err := c.StartShort(time.Second); !errors.Is(err, ErrClosed) {
		t.Errorf("start after close = %v", err)
	}
}

func TestContextOrder(t *testing.T) {
	c := mustOpen(t, Options{})
	a, b := &recorder{keys: [][]byte{[]byte("a")}}, &recorder{}
	ctx := c.NewContext(a, b)
	if _, err := ctx.Start(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	want := []string{"start", "changes", "persist", "postcommit"}
	if !slices.Equal(a.calls, want) || !slices.Equal(b.calls, want) {
		t.Fatalf("calls = %v / %v, want %v", a.calls, b.calls, want)
	}

	// A failed persist rolls back every participant and aborts.
	a.calls, b.calls = nil, nil
	b.failPersist = true
	tx, _ := ctx.Start(time.Minute)
	if err := ctx.Finish(); err == nil || !slices.Contains(a.calls, "rollback") || !slices.Contains(b.calls, "rollback") {
		t.Fatalf("err=%v calls=%v %v", err, a.calls, b.calls)
	}
	if slices.Contains(c.InvalidList(), tx.ID) || slices.Contains(c.InProgress(), tx.ID) {
		t.Fatal("a clean rollback aborts: neither invalid nor in progress")
	}

	// A failed rollback invalidates.
	b.failRollback = true
	tx, _ = ctx.Start(time.Minute)
	if err := ctx.Finish(); err == nil {
		t.Fatal("want error")
	}
	if !slices.Contains(c.InvalidList(), tx.ID) {
		t.Fatal("a failed rollback must invalidate")
	}

	// A conflict surfaces as ErrConflict after rollback.
	b.failPersist, b.failRollback = false, false
	other := c.NewContext(&recorder{keys: [][]byte{[]byte("a")}})
	ctx.Start(time.Minute)
	other.Start(time.Minute)
	if err := other.Finish(); err != nil {
		t.Fatal(err)
	}
	a.calls = nil
	if err := ctx.Finish(); !errors.Is(err, ErrConflict) || !slices.Contains(a.calls, "rollback") {
		t.Fatalf("err = %v calls = %v", err, a.calls)
	}
	// A failing start aborts at once.
	b.startErr = errors.New("no")
	if _, err := ctx.Start(time.Minute); err == nil || len(c.InProgress()) != 0 {
		t.Fatalf("start error: %v, in progress %v", err, c.InProgress())
	}
}

func TestStatsLatency(t *testing.T) {
	c := mustOpen(t, Options{})
	for i := 0; i < 100; i++ {
		tx := must[*Tx](t)(c.StartShort(time.Minute))
		if err := c.Commit(tx); err != nil {
			t.Fatal(err)
		}
	}
	s := c.Stats()
	if s.Started != 100 || s.Committed != 100 || s.CommitLatency.Count != 100 {
		t.Fatalf("stats = %+v", s)
	}
	if q := s.CommitLatency.Quantile(0.99); q <= 0 || q > time.Second {
		t.Fatalf("p99 = %v", q)
	}
}

func TestCommitWithWritesNeedsAtomicLog(t *testing.T) {
	c := mustOpen(t, Options{})
	tx := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.CommitWith(tx, nil, []Write{{Key: []byte("k"), Value: []byte("v")}}); err == nil {
		t.Fatal("staged writes without an AtomicLog must be refused, not dropped")
	} else if !errors.Is(err, ErrMisuse) {
		t.Fatalf("refused with %v, want ErrMisuse (every error wraps a sentinel)", err)
	}
	if err := c.CommitWith(tx, [][]byte{[]byte("k")}, nil); err != nil {
		t.Fatalf("the refused call must leave tx committable: %v", err)
	}
}

// Duplicate change keys are harmless: held once, released and committed cleanly.
func TestDuplicateChangeKeys(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	dup := [][]byte{[]byte("x"), []byte("y"), []byte("x")}
	a := start(c.StartShort(time.Minute))
	if err := c.CanCommit(a, dup); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(a); err != nil {
		t.Fatal(err)
	}
	b := start(c.StartShort(time.Minute))
	if err := c.CanCommit(b, [][]byte{[]byte("x")}); err != nil {
		t.Fatalf("an aborted holder of duplicate keys must release them all: %v", err)
	}
	if err := c.Commit(b); err != nil {
		t.Fatal(err)
	}
	d := start(c.StartShort(time.Minute))
	e := start(c.StartShort(time.Minute))
	if err := c.CommitWith(d, dup, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.CanCommit(e, [][]byte{[]byte("x")}); !errors.Is(err, ErrConflict) {
		t.Fatalf("e = %v, want ErrConflict", err)
	}
}
