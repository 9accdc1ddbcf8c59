package tx

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// holdingLog passes every batch to its Log, except that a batch holding a
// COMMITTING edit waits until release is closed: the window in which
// CanCommit writes without c.mu.
type holdingLog struct {
	Log
	writing chan struct{} // closed when the held batch arrives
	release chan struct{}
	once    sync.Once
}

func (l *holdingLog) Append(b *Batch) error {
	if slices.ContainsFunc(b.Edits, func(e Edit) bool { return e.Kind == EditCommitting }) {
		l.once.Do(func() { close(l.writing) })
		<-l.release
	}
	return l.Log.Append(b)
}

// A short transaction that ends (aborted, or timed out) while its CanCommit
// writes START + COMMITTING can have its ABORTED or INVALID land in the log
// first. Recovery used to replay the START after it and bring the
// transaction back in progress and committing, holding its change keys (a
// conflict for every writer of them) and the prune bound until its timeout
// ran out once more, an hour here. It stays ended now.
//
// In a BadgerLog the end is an unwaited edit that rides with the next
// write: CanCommit's own, ahead of its START in the same record.
// A timed-out transaction's pointer stays invalid: its CanCommit returned
// nil, so its participants may have persisted under it.
func TestEndedBeforeItsCommittingStaysEnded(t *testing.T) {
	for _, tc := range []struct{ log, ending string }{
		{"file", "abort"}, {"file", "timeout"}, {"badger", "abort"}, {"badger", "timeout"},
	} {
		ending := tc.ending
		t.Run(tc.log+"/"+ending, func(t *testing.T) {
			dir := t.TempDir()
			clock := newFakeClock()
			var db *badger.DB
			openLog := func() Log {
				if tc.log == "file" {
					return must[*FileLog](t)(OpenFileLog(dir, FileLogOptions{}))
				}
				if db == nil { // one DB for both runs, as the runtime's store
					db = openBadger(t, dir, false)
					t.Cleanup(func() { db.Close() })
				}
				return must[*BadgerLog](t)(NewBadgerLog(db, BadgerLogOptions{}))
			}
			hl := &holdingLog{Log: openLog(), writing: make(chan struct{}), release: make(chan struct{})}
			c := mustOpen(t, Options{Log: hl, Now: clock.Now})
			tx := must[*Tx](t)(c.StartShort(time.Hour))
			done := make(chan error, 1)
			go func() { done <- c.CanCommit(tx, [][]byte{[]byte("k")}) }()
			<-hl.writing
			switch ending {
			case "abort":
				if err := c.Abort(tx); err != nil {
					t.Fatal(err)
				}
			case "timeout":
				clock.Advance(2 * time.Hour)
				if n := c.ExpireTimedOut(); n != 1 {
					t.Fatalf("ExpireTimedOut = %d, want 1", n)
				}
			}
			close(hl.release)
			<-done // its outcome does not matter: the transaction has ended
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}

			c2 := mustOpen(t, Options{Log: openLog(), Now: clock.Now})
			if s := c2.Stats(); s.InProgress != 0 {
				t.Fatalf("after recovery %d transactions in progress, want 0 (tx %d ended before its COMMITTING landed)", s.InProgress, tx.ID)
			}
			if invalid := slices.Contains(c2.InvalidList(), tx.WritePointer); invalid != (ending == "timeout") {
				t.Fatalf("after recovery pointer %d invalid: %v, want %v", tx.WritePointer, invalid, ending == "timeout")
			}
			other := must[*Tx](t)(c2.StartShort(time.Minute))
			if slices.Contains(other.InProgress(), tx.ID) {
				t.Fatalf("tx %d is in progress in a new snapshot", tx.ID)
			}
			if err := c2.CanCommit(other, [][]byte{[]byte("k")}); err != nil {
				t.Fatalf("CanCommit of a key only the ended transaction named = %v", err)
			}
			if err := c2.Commit(other); err != nil {
				t.Fatal(err)
			}
			if err := c2.Commit(tx); !errors.Is(err, ErrNotInProgress) {
				t.Fatalf("Commit of the ended transaction after recovery = %v, want ErrNotInProgress", err)
			}
		})
	}
}
