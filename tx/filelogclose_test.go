package tx

import (
	"testing"
	"time"
)

// An appender waiting behind a sync when the FileLog is closed: Close syncs
// everything appended, so the appender returns nil once woken, and its edit
// is recovered (it waited forever, and once woken dereferenced the closed
// segment).
func TestFileLogCloseWakesWaitingAppender(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenFileLog(dir, FileLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Recover(); err != nil {
		t.Fatal(err)
	}
	done := appendBehindSync(l) // a sync is under way: the appender queues behind it
	// The sync ends; its broadcast is not needed for this: Close's must do.
	l.mu.Lock()
	l.flushing = false
	l.mu.Unlock()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Append waiting across Close = %v, want nil (Close synced it)", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Append still waiting a minute after Close")
	}
	l2, err := OpenFileLog(dir, FileLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	_, edits, err := l2.Recover()
	if err != nil {
		t.Fatal(err)
	}
	if len(edits) != 1 || edits[0].TxID != 42 {
		t.Fatalf("recovered %v, want the ABORTED of 42", edits)
	}
	if err := l.Append(&Batch{Edits: []Edit{{Kind: EditAborted, TxID: 43}}, Wait: true}); err == nil {
		t.Fatal("Append after Close succeeded")
	}
}

// appendBehindSync marks a sync of l under way and starts a waited Append of
// one edit (ABORTED of tx 42), which queues behind it; it returns once the
// append is counted (under mu, before the appender waits on cond), with
// the channel its result comes on.
func appendBehindSync(l *FileLog) <-chan error {
	l.mu.Lock()
	l.flushing = true
	l.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		done <- l.Append(&Batch{Edits: []Edit{{Kind: EditAborted, TxID: 42}}, Wait: true})
	}()
	for {
		l.mu.Lock()
		n := l.appended
		l.mu.Unlock()
		if n == 1 {
			return done
		}
		time.Sleep(time.Millisecond)
	}
}
