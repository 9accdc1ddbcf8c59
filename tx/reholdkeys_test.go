package tx

import (
	"errors"
	"testing"
	"time"
)

// A CanCommit (or CommitWith) refused for a conflict changes no state: the
// keys an earlier CanCommit of the same transaction reserved stay reserved.
// They were released, so another transaction could commit them while the
// first one's participants had persisted; the COMMITTING edit still listed
// them, so after a restart the first one could commit them too — a lost
// update.
func TestRefusedCanCommitKeepsEarlierHolds(t *testing.T) {
	for _, second := range []string{"CanCommit", "CommitWith"} {
		c := mustOpen(t, Options{})
		start := must[*Tx](t)
		t1 := start(c.StartShort(time.Minute))
		t2 := start(c.StartShort(time.Minute))
		if err := c.CanCommit(t1, [][]byte{[]byte("a")}); err != nil {
			t.Fatal(err)
		}
		if err := c.CanCommit(t2, [][]byte{[]byte("b")}); err != nil {
			t.Fatal(err)
		}
		var err error
		if second == "CanCommit" {
			err = c.CanCommit(t1, [][]byte{[]byte("a"), []byte("b")})
		} else {
			err = c.CommitWith(t1, [][]byte{[]byte("a"), []byte("b")}, nil)
		}
		if !errors.Is(err, ErrConflict) {
			t.Fatalf("%s overlapping a hold: %v", second, err)
		}
		t3 := start(c.StartShort(time.Minute))
		if err := c.CommitWith(t3, [][]byte{[]byte("a")}, nil); !errors.Is(err, ErrConflict) {
			t.Fatalf("after a refused %s, another transaction committed a key the first still holds: %v", second, err)
		}
		// Its last change set was refused: Commit refuses too (it would
		// commit "b" unchecked), and the transaction aborts.
		if err := c.Commit(t1); !errors.Is(err, ErrConflict) {
			t.Fatalf("Commit after a refused %s: %v, want a conflict", second, err)
		}
		if err := c.Abort(t1); err != nil {
			t.Fatal(err)
		}
	}
}
