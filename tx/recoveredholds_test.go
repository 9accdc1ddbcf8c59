package tx

import (
	"errors"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

// Two transactions recovered as committing with the same change key — the
// first's ABORTED is a hint that rides with another transaction's write,
// which a BadgerLog can land after the second's COMMITTING or lose at a
// crash while that lands — cannot both hold the key. The one that could not
// hold it again is refused at Commit, as after a conflict. It used to keep
// nothing held and commit anyway, its key never entering the conflict index:
// a transaction that started before that commit and changed the key then
// committed too (a lost update).
func TestRecoveredCommittersShareNoKey(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenFileLog(dir, FileLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Recover(); err != nil {
		t.Fatal(err)
	}
	key := xxhash.Sum64String("k")
	expires := time.Now().Add(time.Hour).UnixNano()
	for _, e := range []Edit{
		{Kind: EditReserve, Pointer: 1 << 20},
		{Kind: EditStart, TxID: 1, TxKind: Short, Expires: expires},
		{Kind: EditCommitting, TxID: 1, Keys: []uint64{key}},
		// tx 1's ABORTED lost
		{Kind: EditStart, TxID: 2, TxKind: Short, Expires: expires},
		{Kind: EditCommitting, TxID: 2, Keys: []uint64{key}},
	} {
		if err := l.Append(&Batch{Edits: []Edit{e}, Wait: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	c := openFileCoord(t, dir, Options{})
	c.mu.Lock()
	var holder, loser uint64
	for id, st := range c.inProgress {
		if len(st.keys) > 0 {
			holder = id
		} else {
			loser = id
		}
	}
	c.mu.Unlock()
	if holder == 0 || loser == 0 {
		t.Fatalf("recovered holder %d, loser %d", holder, loser)
	}
	other := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.Commit(&Tx{ID: loser}); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit of the recovered transaction that could not hold its key = %v, want ErrConflict", err)
	}
	if err := c.Abort(&Tx{ID: holder}); err != nil {
		t.Fatal(err)
	}
	if err := c.CanCommit(other, [][]byte{[]byte("k")}); err != nil {
		t.Fatal(err) // nothing committed k since it started
	}
}
