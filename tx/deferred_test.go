package tx

import (
	"sync"
	"testing"
	"time"
)

// A deferred commit is visible to the next transaction before the log's sync
// has finished, its Wait returns only once that sync has, and Finish (not
// deferred) does not return before its own sync either.
func TestFinishDeferredVisibleBeforeDurable(t *testing.T) {
	db := openBadger(t, t.TempDir(), false)
	defer db.Close()
	l, err := NewBadgerLog(db, BadgerLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	// Every sync blocks until the test lets them all go.
	entered := make(chan struct{}, 64)
	release := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	c, err := Open(Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		letGo() // Close syncs what is left
		c.Close()
	}()
	tb := stagedTable{newTable(db, "t/")}
	ctx := c.NewContext(tb)
	start := func() *Tx {
		t.Helper()
		tx, err := ctx.Start(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}

	// A first commit reserves a block of write pointers (a synced edit).
	start()
	if err := ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	l.syncer.synced = func([]string) {
		entered <- struct{}{}
		<-release
	}

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
	letGo()
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}

// Close makes deferred commits nobody waited for durable.
func TestCloseSyncsDeferredCommits(t *testing.T) {
	db := openBadger(t, t.TempDir(), false)
	defer db.Close()
	l, err := NewBadgerLog(db, BadgerLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	tb := stagedTable{newTable(db, "t/")}
	ctx := c.NewContext(tb)
	var last Pending
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
	db := openBadger(t, t.TempDir(), false)
	defer db.Close()
	l, err := NewBadgerLog(db, BadgerLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{}, 64)
	release := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer func() {
		letGo()
		c.Close()
	}()
	tb := stagedTable{newTable(db, "t/")}
	ctx := c.NewContext(tb)
	if _, err := ctx.Start(time.Minute); err != nil { // reserves pointers (a synced edit)
		t.Fatal(err)
	}
	if err := ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	l.syncer.synced = func([]string) {
		entered <- struct{}{}
		<-release
	}
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
	letGo()
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
