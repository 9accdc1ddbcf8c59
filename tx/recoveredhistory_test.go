package tx

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// A recovered transaction conflicts on every key it did not hold before
// the restart, so the keys committed since then are of no use to it. Its
// start (0: the index is new at Open) counted as the oldest all the same:
// while it lived no generation of committed keys was dropped, and with a
// long one (24 h) the index grew with every commit for a day.
func TestRecoveredTransactionsKeepNoHistory(t *testing.T) {
	dir := t.TempDir()
	c := openFileCoord(t, dir, Options{})
	long := must[*Tx](t)(c.StartLong())
	holder := must[*Tx](t)(c.StartShort(time.Hour))
	if err := c.CanCommit(holder, [][]byte{[]byte("held")}); err != nil {
		t.Fatal(err)
	}
	crash(c)
	c2 := openFileCoord(t, dir, Options{})
	defer c2.Close()
	const commits, perCommit = 100, 200 // five generations of keys
	keys := make([][]byte, perCommit)
	for i := range commits {
		for k := range keys {
			keys[k] = fmt.Appendf(keys[k][:0], "%d/%d", i, k)
		}
		tx := must[*Tx](t)(c2.StartShort(time.Minute))
		if err := c2.CanCommit(tx, keys); err != nil {
			t.Fatal(err)
		}
		if err := c2.Commit(tx); err != nil {
			t.Fatal(err)
		}
	}
	if n := c2.Stats().ConflictKeys; n > defaultGenKeys+perCommit+1 {
		t.Fatalf("%d committed keys kept while only recovered transactions were older, want at most a generation (%d)", n, defaultGenKeys)
	}
	// They stay as conservative as before: the holder keeps its key, and
	// neither may commit one it did not hold.
	fresh := must[*Tx](t)(c2.StartShort(time.Minute))
	if err := c2.CanCommit(fresh, [][]byte{[]byte("held")}); !errors.Is(err, ErrConflict) {
		t.Fatalf("new tx vs recovered holder = %v, want ErrConflict", err)
	}
	c2.Abort(fresh)
	for _, tx := range []*Tx{long, holder} {
		if err := c2.CanCommit(tx, [][]byte{[]byte("held"), []byte("0/0")}); !errors.Is(err, ErrConflict) {
			t.Fatalf("recovered tx %d, a key it did not hold = %v, want ErrConflict", tx.ID, err)
		}
	}
	if err := c2.CanCommit(holder, [][]byte{[]byte("held")}); err != nil {
		t.Fatal(err)
	}
	if err := c2.Commit(holder); err != nil {
		t.Fatal(err)
	}
}

// Keeping no history is safe only while a recovered transaction can commit
// no key it let go: here the holder's next CanCommit narrows its keys to
// one, a new transaction commits the other, and the generations recording
// that commit are dropped; the holder asking for it again must still
// conflict (its check would find nothing: a lost update).
func TestRecoveredHolderCannotRetakeReleasedKey(t *testing.T) {
	dir := t.TempDir()
	c := openFileCoord(t, dir, Options{})
	holder := must[*Tx](t)(c.StartShort(time.Hour))
	kept, released := []byte("kept"), []byte("released")
	if err := c.CanCommit(holder, [][]byte{kept, released}); err != nil {
		t.Fatal(err)
	}
	crash(c)
	c2 := openFileCoord(t, dir, Options{})
	defer c2.Close()
	if err := c2.CanCommit(holder, [][]byte{kept}); err != nil {
		t.Fatal(err)
	}
	other := must[*Tx](t)(c2.StartShort(time.Minute))
	if err := c2.CommitWith(other, [][]byte{released}, nil); err != nil {
		t.Fatalf("the key the holder let go: %v", err)
	}
	keys := make([][]byte, 200)
	for i := range 5 * defaultGenKeys / len(keys) { // drops the generation of other's commit
		for k := range keys {
			keys[k] = fmt.Appendf(keys[k][:0], "%d/%d", i, k)
		}
		tx := must[*Tx](t)(c2.StartShort(time.Minute))
		if err := c2.CommitWith(tx, keys, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := c2.Stats().ConflictKeys; n > defaultGenKeys+len(keys)+1 {
		t.Fatalf("%d committed keys kept: nothing dropped, nothing tested", n)
	}
	if err := c2.CanCommit(holder, [][]byte{kept, released}); !errors.Is(err, ErrConflict) {
		t.Fatalf("recovered holder retaking a key committed since it let it go = %v, want ErrConflict", err)
	}
	if err := c2.CanCommit(holder, [][]byte{kept}); err != nil {
		t.Fatal(err)
	}
	if err := c2.Commit(holder); err != nil {
		t.Fatal(err)
	}
}
