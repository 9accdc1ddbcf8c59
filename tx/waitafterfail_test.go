package tx

import (
	"errors"
	"os"
	"testing"
)

// Pending.Wait of a deferred commit that a sync already made durable returns
// nil even after a later sync failed. It used to return that failure (as
// ErrLogFailed: "its fate is unknown") for a commit known to be durable, so
// a driver settling its commits reported as lost what had survived.
func TestWaitOnDurableCommitAfterSyncFailure(t *testing.T) {
	h := newSyncHeld(t)
	l, c, tb, ctx := h.l, h.c, h.tb, h.ctx
	h.start(t)
	tb.Put("a", 1)
	durable, err := ctx.FinishDeferred()
	if err != nil {
		t.Fatal(err)
	}
	h.start(t)
	tb.Put("b", 2)
	if err := ctx.Finish(); err != nil { // its sync covers the deferred one
		t.Fatal(err)
	}
	l.smu.Lock()
	synced := l.synced
	l.smu.Unlock()
	if durable.c == nil || synced < durable.ticket {
		t.Fatalf("deferred ticket %d, synced up to %d: want it covered", durable.ticket, synced)
	}

	l.syncer.mu.Lock()
	l.syncer.syncFile = func(*os.File) error { return errors.New("disk gone") }
	l.syncer.mu.Unlock()
	h.start(t)
	tb.Put("c", 3)
	lost, err := ctx.FinishDeferred()
	if err != nil {
		t.Fatal(err)
	}
	if err := lost.Wait(); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("Wait with a failing sync = %v, want ErrLogFailed", err)
	}
	if _, err := c.StartShort(1e9); !errors.Is(err, ErrLogFailed) {
		t.Fatalf("start after a failed sync = %v, want ErrLogFailed", err)
	}
	if err := durable.Wait(); err != nil {
		t.Fatalf("Wait of a commit synced before the failure = %v, want nil", err)
	}
}

// A deferred commit after the log's durability failed (here the sync at a
// memtable rotation, which only a later sync used to report) is refused and
// stops the coordinator: it used to be written and made visible, with its
// Wait failing later, so steps read (and HTTP reads showed) commits that no
// sync could make durable, until some commit waited for a sync. The same
// holds for a failure between the log's check and its write (a sync running
// meanwhile, or the rotation sync the write itself sets off): the check
// before the write alone let that one commit through.
func TestDeferredCommitAfterSyncFailureRefused(t *testing.T) {
	for _, between := range []bool{false, true} {
		name := map[bool]string{false: "failed before", true: "failed between check and write"}[between]
		t.Run(name, func(t *testing.T) {
			h := newSyncHeld(t)
			l, c, tb, ctx := h.l, h.c, h.tb, h.ctx
			failed := error(errors.New("fdatasync at rotation: input/output error"))
			if between {
				testHookDurabilityChecked = func() { l.hooks.err.Store(&failed) }
				t.Cleanup(func() { testHookDurabilityChecked = nil })
			} else {
				l.hooks.err.Store(&failed)
			}
			tx := h.start(t)
			tb.Put("a", 1)
			if _, err := ctx.FinishDeferred(); !errors.Is(err, ErrLogFailed) {
				t.Fatalf("FinishDeferred after a failed sync = %v, want ErrLogFailed", err)
			}
			if _, err := c.StartShort(1e9); !errors.Is(err, ErrLogFailed) {
				t.Fatalf("start after the refused commit = %v, want ErrLogFailed", err)
			}
			if c.ReadPointer() >= tx.WritePointer {
				t.Fatal("the refused deferred commit became visible")
			}
		})
	}
}
