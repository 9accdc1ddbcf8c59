package tx

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// A bound reported while a transaction is in progress below it says nothing
// of that transaction's data: it may persist and then be invalidated. Its
// pointer must stay invalid after such a report, and after later prunes
// that the stored bound would have allowed.
func TestPrunerBoundHeldAtOldestInProgress(t *testing.T) {
	c := mustOpen(t, Options{ExpiryInterval: -1})
	start := must[*Tx](t)
	p := c.RegisterPruner("participant")
	live := start(c.StartShort(time.Minute)) // persists data, then is invalidated
	later := start(c.StartShort(time.Minute))
	if err := c.Commit(later); err != nil {
		t.Fatal(err)
	}
	// The participant has no invalid data below later+1 now: true when said.
	p.Report(later.ID + 1)
	if err := c.Invalidate(live); err != nil {
		t.Fatal(err)
	}
	c.pruneInvalid() // a prune with the stored bound (any later report runs one)
	if got := c.InvalidList(); !slices.Equal(got, []uint64{live.ID}) {
		t.Fatalf("invalid = %v, want [%d]: the invalidated transaction's data became visible", got, live.ID)
	}
	if start(c.StartShort(time.Minute)).Visible(live.ID) {
		t.Fatal("an invalidated transaction's writes are visible")
	}
	// Reported again once it is settled, the bound prunes it.
	p.Report(later.ID + 2)
	if got := c.InvalidList(); len(got) != 0 {
		t.Fatalf("invalid = %v after a bound past it reported once it was invalid", got)
	}
}

// Commit after a refused CanCommit would commit writes no conflict check
// passed (a lost update): it is refused too, and the transaction can still
// be aborted. A CanCommit that passes afterwards clears it.
func TestCommitAfterRefusedCanCommit(t *testing.T) {
	c := mustOpen(t, Options{})
	start := must[*Tx](t)
	key := [][]byte{[]byte("k")}
	a := start(c.StartShort(time.Minute))
	b := start(c.StartShort(time.Minute))
	if err := c.CanCommit(b, key); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(b); err != nil {
		t.Fatal(err)
	}
	var conflict *ConflictError
	if err := c.CanCommit(a, key); !errors.As(err, &conflict) {
		t.Fatalf("CanCommit = %v, want a conflict", err)
	}
	if err := c.Commit(a); !errors.As(err, &conflict) {
		t.Fatalf("Commit after a refused CanCommit = %v, want a conflict", err)
	}
	if err := c.Abort(a); err != nil {
		t.Fatalf("Abort after the refused commit: %v", err)
	}

	d := start(c.StartShort(time.Minute))
	e := start(c.StartShort(time.Minute))
	if err := c.CanCommit(e, key); err != nil {
		t.Fatal(err)
	}
	if err := c.CanCommit(d, key); !errors.As(err, &conflict) {
		t.Fatalf("CanCommit = %v, want a conflict (e holds the key)", err)
	}
	if err := c.Abort(e); err != nil {
		t.Fatal(err)
	}
	if err := c.CanCommit(d, [][]byte{[]byte("other")}); err != nil {
		t.Fatalf("CanCommit of other keys: %v", err)
	}
	if err := c.Commit(d); err != nil {
		t.Fatalf("Commit after a CanCommit that passed: %v", err)
	}
}

// A reservation block that could wrap the pointers around is refused at Open.
func TestReserveBlockBounded(t *testing.T) {
	for _, block := range []uint64{MaxReserveBlock + 1, 1<<64 - 1} {
		if c, err := Open(Options{ReserveBlock: block, ExpiryInterval: -1}); err == nil {
			c.Close()
			t.Errorf("ReserveBlock %d accepted", block)
		} else if !errors.Is(err, ErrMisuse) {
			t.Errorf("ReserveBlock %d refused with %v, want ErrMisuse (every error wraps a sentinel)", block, err)
		}
	}
	c := mustOpen(t, Options{ReserveBlock: MaxReserveBlock})
	if _, err := c.StartShort(time.Minute); err != nil {
		t.Fatal(err)
	}
}
