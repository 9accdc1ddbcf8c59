package tx

import (
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A deferred commit is visible to the next transaction before the log's sync
// has finished, its Wait returns only once that sync has, and Finish (not
// deferred) does not return before its own sync either.
func TestFinishDeferredVisibleBeforeDurable(t *testing.T) {
	h := newSyncHeld(t)
	c, tb, ctx, entered := h.c, h.tb, h.ctx, h.entered
	start := func() *Tx { return h.start(t) }
	h.hold()

	first := start()
	tb.Put("a", 7)
	p, err := ctx.FinishDeferred()
	if err != nil {
		t.Fatal(err)
	}
	if p.c == nil {
		t.Fatal("deferred commit with a syncing BadgerLog came back already durable")
	}
	if got := c.Stats().Deferred; got != 1 {
		t.Fatalf("Stats.Deferred = %d after one deferred commit (and one Finish), want 1", got)
	}
	select {
	case <-entered:
		t.Fatal("FinishDeferred synced")
	default:
	}

	second := start()
	if !second.Visible(first.WritePointer) {
		t.Fatal("a deferred commit is not visible to the next transaction")
	}
	if v, _, ok, err := tb.Get("a"); err != nil || !ok || v != 7 {
		t.Fatalf("next transaction reads a = %d (found %v, %v), want 7", v, ok, err)
	}
	tb.Put("b", 1)

	// Finish of the second must wait for a sync; so must the first's Wait.
	finished := make(chan error, 1)
	go func() { finished <- ctx.Finish() }()
	waited := make(chan error, 1)
	go func() { waited <- p.Wait() }()
	<-entered // one of them is syncing now and blocked
	select {
	case err := <-finished:
		t.Fatalf("Finish returned during its sync: %v", err)
	case err := <-waited:
		t.Fatalf("Wait returned during the sync: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	h.letGo()
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

// Close makes deferred commits nobody waited for durable.
func TestCloseSyncsDeferredCommits(t *testing.T) {
	h := newSyncHeld(t)
	l, c, tb, ctx := h.l, h.c, h.tb, h.ctx
	var last Pending
	var err error
	for i := range 5 {
		if _, err := ctx.Start(time.Minute); err != nil {
			t.Fatal(err)
		}
		tb.Put("k", int64(i))
		if last, err = ctx.FinishDeferred(); err != nil {
			t.Fatal(err)
		}
	}
	var syncs int
	l.syncer.synced = func([]string) { syncs++ }
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if syncs == 0 {
		t.Fatal("Close left deferred commits unsynced")
	}
	l.smu.Lock()
	synced, done := l.synced, l.done
	l.smu.Unlock()
	if synced < done || synced < last.ticket {
		t.Fatalf("after Close: synced up to %d, written %d, last deferred ticket %d", synced, done, last.ticket)
	}
	if err := last.Wait(); err != nil { // finds it synced: no file reopened
		t.Fatal(err)
	}
}

// A plain Finish (CommitWith) is not visible to other transactions before its
// sync: one that read it could otherwise survive a power loss that undid it
// (specs/transactions.md §2).
func TestFinishNotVisibleBeforeDurable(t *testing.T) {
	h := newSyncHeld(t)
	c, tb, ctx, entered := h.c, h.tb, h.ctx, h.entered
	h.hold()
	first, err := ctx.Start(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tb.Put("a", 7)
	finished := make(chan error, 1)
	go func() { finished <- ctx.Finish() }()
	<-entered // its sync is running, and held
	other, err := c.StartShort(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if other.Visible(first.WritePointer) {
		t.Fatal("a commit waiting for its sync is visible to a new transaction")
	}
	h.letGo()
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	later, err := c.StartShort(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !later.Visible(first.WritePointer) {
		t.Fatal("the commit is not visible after its sync")
	}
}

// syncHeld is a coordinator on a syncing BadgerLog whose syncs can be held:
// after hold, every sync signals entered and waits until letGo.
type syncHeld struct {
	l       *BadgerLog
	c       *Coordinator
	tb      stagedTable
	ctx     *Context
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

// openSyncedLog opens a coordinator over a syncing BadgerLog in db (closed
// with the test, after the coordinator's own cleanups).
func openSyncedLog(t *testing.T, db *badger.DB) (*BadgerLog, *Coordinator) {
	t.Helper()
	return openLogWith(t, db, BadgerLogOptions{Sync: true})
}

// openLogWith is openSyncedLog with the log's options given.
func openLogWith(t *testing.T, db *badger.DB, opts BadgerLogOptions) (*BadgerLog, *Coordinator) {
	t.Helper()
	t.Cleanup(func() { db.Close() })
	l, err := NewBadgerLog(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

func newSyncHeld(t *testing.T) *syncHeld {
	t.Helper()
	db := openBadger(t, t.TempDir(), false)
	l, c := openSyncedLog(t, db)
	h := &syncHeld{l: l, c: c, tb: stagedTable{newTable(db, "t/")}, entered: make(chan struct{}, 64), release: make(chan struct{})}
	h.ctx = c.NewContext(h.tb)
	t.Cleanup(func() {
		h.letGo() // Close syncs what is left
		c.Close()
	})
	// A first commit reserves a block of write pointers (a synced edit).
	h.start(t)
	if err := h.ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *syncHeld) hold() {
	h.l.syncer.synced = func([]string) {
		h.entered <- struct{}{}
		<-h.release
	}
}

func (h *syncHeld) letGo() { h.once.Do(func() { close(h.release) }) }

func (h *syncHeld) start(t *testing.T) *Tx {
	t.Helper()
	tx, err := h.ctx.Start(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// On a DB opened without SyncHooks a deferred commit would not be safe
// on power loss, so the BadgerLog commits it durably: FinishDeferred returns
// after the sync, with nothing to wait for, and counts as no deferred commit.
func TestDeferredWithoutSyncHooksIsDurable(t *testing.T) {
	o := badgerTestOptions(t.TempDir(), false)
	o.Logger = nil // what SyncHooks installed
	db, err := badger.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	l, c := openSyncedLog(t, db)
	defer c.Close()
	tb := stagedTable{newTable(db, "t/")}
	ctx := c.NewContext(tb)
	var syncs int
	l.syncer.synced = func([]string) { syncs++ }
	for range 3 {
		if _, err := ctx.Start(time.Minute); err != nil {
			t.Fatal(err)
		}
		tb.Put("k", 1)
		before := syncs
		p, err := ctx.FinishDeferred()
		if err != nil {
			t.Fatal(err)
		}
		if p.c != nil || syncs == before {
			t.Fatalf("deferred commit without SyncHooks: pending %v, syncs %d → %d; want synced before it returned", p.c != nil, before, syncs)
		}
	}
	if got := c.Stats().Deferred; got != 0 {
		t.Fatalf("Stats.Deferred = %d, want 0", got)
	}
}

// Hooks made for other directories (options changed after SyncHooks)
// guards nothing: the log treats the DB as one without it.
func TestSyncHooksForOtherDirsIgnored(t *testing.T) {
	o := badgerTestOptions(t.TempDir(), false).WithDir(t.TempDir()).WithValueDir(t.TempDir())
	db, err := badger.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if hooksOf(db) != nil {
		t.Fatal("hooks for other directories were taken for the DB's")
	}
	db2, err := badger.Open(badgerTestOptions(t.TempDir(), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if hooksOf(db2) == nil {
		t.Fatal("SyncHooks not found")
	}
}
