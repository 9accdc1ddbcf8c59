package tx

import (
	"slices"
	"testing"
	"time"
)

// A commit that passed its checks when Close came wrote to the closed log
// afterwards: a FileLog answered ErrLogFailed (the commit was acknowledged
// as of unknown fate), a BadgerLog wrote into the DB after Close and opened
// the syncer's files again. Close now waits for such a commit, which lands.
func TestCommitRacingCloseLands(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenFileLog(dir, FileLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Log: l, ExpiryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := c.StartShort(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CanCommit(tx, [][]byte{[]byte("k")}); err != nil {
		t.Fatal(err)
	}
	checked, proceed := make(chan struct{}), make(chan struct{})
	testHookCommitChecked = func() { close(checked); <-proceed }
	defer func() { testHookCommitChecked = nil }()
	committed := make(chan error, 1)
	go func() { committed <- c.Commit(tx) }()
	<-checked
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	// Before the fix Close returned here at once; the wait only gives it
	// the chance (a slow machine makes the test pass, never fail).
	select {
	case err := <-closed:
		closed <- err
	case <-time.After(200 * time.Millisecond):
	}
	close(proceed)
	if err := <-committed; err != nil {
		t.Fatalf("commit that passed its checks before Close: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}

	// The commit is in the log.
	l2, err := OpenFileLog(dir, FileLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Open(Options{Log: l2, ExpiryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if slices.Contains(c2.InProgress(), tx.ID) || slices.Contains(c2.InvalidList(), tx.ID) || c2.ReadPointer() < tx.ID {
		t.Fatalf("commit lost: in progress %v, invalid %v, read pointer %d", c2.InProgress(), c2.InvalidList(), c2.ReadPointer())
	}
}
