package tx

import (
	"errors"
	"testing"
	"time"
)

// gatedLog is a FileLog whose next waited Append, once armed, signals
// entered and waits for proceed before it writes anything.
type gatedLog struct {
	*FileLog
	armed            chan struct{} // closed by arm
	entered, proceed chan struct{}
}

func newGatedLog(t *testing.T) *gatedLog {
	l, err := OpenFileLog(t.TempDir(), FileLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	return &gatedLog{FileLog: l, armed: make(chan struct{}), entered: make(chan struct{}), proceed: make(chan struct{})}
}

func (l *gatedLog) arm() { close(l.armed) }

func (l *gatedLog) Append(b *Batch) error {
	select {
	case <-l.armed:
		if b.Wait && len(b.Edits) > 0 {
			select {
			case <-l.entered: // already used
			default:
				close(l.entered)
				<-l.proceed
			}
		}
	default:
	}
	return l.FileLog.Append(b)
}

// A second CanCommit (or a one-step commit) of a transaction that names
// fewer keys than its first keeps the keys it drops held until its new
// record is durable. They were let go before the write: another transaction
// could take and commit one, and a crash before the record landed left the
// first COMMITTING, naming that key, as the one recovery trusts, so the
// first transaction held it again and its Commit (its participants may have
// persisted for the first CanCommit) went through: a lost update.
func TestReCanCommitKeepsDroppedKeysUntilDurable(t *testing.T) {
	for _, second := range []string{"CanCommit", "CommitWith"} {
		t.Run(second, func(t *testing.T) {
			l := newGatedLog(t)
			c := mustOpen(t, Options{Log: l})
			start := must[*Tx](t)
			t1 := start(c.StartShort(time.Minute))
			t2 := start(c.StartShort(time.Minute))
			if err := c.CanCommit(t1, [][]byte{[]byte("k"), []byte("j")}); err != nil {
				t.Fatal(err)
			}
			l.arm()
			done := make(chan error, 1)
			go func() {
				if second == "CanCommit" {
					done <- c.CanCommit(t1, [][]byte{[]byte("j")})
				} else {
					done <- c.CommitWith(t1, [][]byte{[]byte("j")}, nil)
				}
			}()
			<-l.entered // t1's record is being written, not durable yet
			var ce *ConflictError
			err := c.CanCommit(t2, [][]byte{[]byte("k")})
			close(l.proceed)
			if !errors.As(err, &ce) || !ce.Pending {
				t.Fatalf("CanCommit of a key the first CanCommit's durable record names, while a %s dropping it is written = %v, want a pending conflict", second, err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			// Durable now: the dropped key is free.
			if err := c.CanCommit(t2, [][]byte{[]byte("k")}); err != nil {
				t.Fatalf("the key the second %s dropped stayed held after it landed: %v", second, err)
			}
			if err := c.Commit(t2); err != nil {
				t.Fatal(err)
			}
			if second == "CanCommit" {
				if err := c.Commit(t1); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
