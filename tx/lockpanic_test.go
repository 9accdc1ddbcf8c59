package tx

import (
	"sync/atomic"
	"testing"
	"time"
)

// panickyLog is a FileLog whose Append panics once armed: an internal bug
// hit while the coordinator holds its lock.
type panickyLog struct {
	*FileLog
	armed atomic.Bool
}

func (l *panickyLog) Append(b *Batch) error {
	if l.armed.Load() {
		panic("log bug")
	}
	return l.FileLog.Append(b)
}

// lockProbe is a participant that arms its hook at one step and, when the
// Context rolls it back, notes whether the coordinator's lock is held (and
// then frees it, so that a failing test fails instead of hanging in Abort).
type lockProbe struct {
	recorder
	c      *Coordinator
	armAt  string
	arm    func()
	heldMu bool
}

func (p *lockProbe) ChangeKeys() [][]byte {
	if p.armAt == "changes" {
		p.arm()
	}
	return p.recorder.ChangeKeys()
}

func (p *lockProbe) Persist() error {
	if p.armAt == "persist" {
		p.arm()
	}
	return p.recorder.Persist()
}

func (p *lockProbe) Rollback() error {
	if !p.c.mu.TryLock() {
		p.heldMu = true
	}
	p.c.mu.Unlock()
	return p.recorder.Rollback()
}

// A panic under the coordinator's lock (here a log's Append panicking, on a
// commit's inline write or on the expiry a CanCommit or Commit runs first)
// propagates with the lock free. The lock stayed held, so the Context's
// abort path, which takes it to end the transaction, hung forever instead of
// letting the program crash.
func TestPanicUnderLockPropagates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		synced bool // a synced FileLog writes commits outside the lock
		armAt  string
		expire bool // the transaction times out, so the call invalidates it first
	}{
		{name: "inline commit", armAt: "persist"},
		{name: "CanCommit expiring", synced: true, armAt: "changes", expire: true},
		{name: "Commit expiring", synced: true, armAt: "persist", expire: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl, err := OpenFileLog(t.TempDir(), FileLogOptions{Sync: tc.synced})
			if err != nil {
				t.Fatal(err)
			}
			l := &panickyLog{FileLog: fl}
			clock := newFakeClock()
			c := mustOpen(t, Options{Log: l, Now: clock.Now})
			t.Cleanup(func() { l.armed.Store(false) }) // before mustOpen's Close
			p := &lockProbe{recorder: recorder{keys: [][]byte{[]byte("k")}}, c: c, armAt: tc.armAt}
			p.arm = func() {
				l.armed.Store(true)
				if tc.expire {
					clock.Advance(2 * time.Minute)
				}
			}
			ctx := c.NewContext(p)
			must[*Tx](t)(ctx.Start(time.Minute))
			got := func() (r any) {
				defer func() { r = recover() }()
				ctx.Finish()
				return nil
			}()
			if got != "log bug" {
				t.Fatalf("recovered %v, want the log's panic", got)
			}
			if p.heldMu {
				t.Fatal("the coordinator's lock was still held when the Context rolled back after the panic (its Abort would hang)")
			}
		})
	}
}
