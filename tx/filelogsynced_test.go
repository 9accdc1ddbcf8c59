package tx

import (
	"errors"
	"testing"
)

// An appender whose batch a sync covered returns nil even if a later sync
// failed before it woke up: it used to return that failure, reporting a
// durable commit as of unknown fate (ErrLogFailed), as the BadgerLog did
// for deferred commits.
func TestFileLogSyncedAppendIgnoresLaterFailure(t *testing.T) {
	l, err := OpenFileLog(t.TempDir(), FileLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Recover(); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := appendBehindSync(l) // a sync is under way: the appender queues behind it
	// The leader's sync covers the batch; another sync fails before the
	// appender runs again.
	l.mu.Lock()
	l.writeLocked()
	if err := l.seg.sync(0, l.seg.off); err != nil {
		t.Fatal(err)
	}
	l.synced, l.flushing = l.written, false
	l.err = errors.New("tx: file log: a later sync: input/output error")
	l.cond.Broadcast()
	l.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("Append of a synced batch = %v, want nil", err)
	}
}
