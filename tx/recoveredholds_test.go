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
	logCommittersOfOneKey(t, dir, 1, 2) // tx 1's ABORTED lost
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

// logCommittersOfOneKey writes a FileLog in dir in which the transactions
// ids, in that order, start and pass CanCommit with the same change key "k",
// none of them ending: their ABORTED or INVALID hints were lost.
func logCommittersOfOneKey(t *testing.T, dir string, ids ...uint64) {
	t.Helper()
	l, err := OpenFileLog(dir, FileLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Recover(); err != nil {
		t.Fatal(err)
	}
	key := xxhash.Sum64String("k")
	expires := time.Now().Add(time.Hour).UnixNano()
	edits := []Edit{{Kind: EditReserve, Pointer: 1 << 20}}
	for _, id := range ids {
		edits = append(edits,
			Edit{Kind: EditStart, TxID: id, TxKind: Short, Expires: expires},
			Edit{Kind: EditCommitting, TxID: id, Keys: []uint64{key}})
	}
	for _, e := range edits {
		if err := l.Append(&Batch{Edits: []Edit{e}, Wait: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// Of recovered committers that name the same key, the oldest (lowest
// pointer) holds it, at every recovery of the same log. Which one held it
// used to follow Go's map order, so two recoveries of one log could pick
// different transactions.
func TestRecoveredCommittersOldestHolds(t *testing.T) {
	dir := t.TempDir()
	logCommittersOfOneKey(t, dir, 5, 3, 9, 7, 1)
	for round := range 4 {
		c := openFileCoord(t, dir, Options{})
		c.mu.Lock()
		var holders []uint64
		for id, st := range c.inProgress {
			if len(st.keys) > 0 {
				holders = append(holders, id)
			}
		}
		c.mu.Unlock()
		if len(holders) != 1 || holders[0] != 1 {
			t.Fatalf("recovery %d: holders %v, want only the oldest committer, 1", round, holders)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A recovered committer refused for a key another holds stays refused
// across a snapshot and a restart. The snapshot recorded it as committing
// with no keys and forgot the refusal, so after the next restart its Commit
// went through with its key (its data persisted before the first crash)
// never entering the conflict index: the lost update that
// TestRecoveredCommittersShareNoKey guards, one restart later.
func TestRecoveredRefusalSurvivesSnapshot(t *testing.T) {
	dir := t.TempDir()
	logCommittersOfOneKey(t, dir, 1, 2)
	c := openFileCoord(t, dir, Options{})
	if err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = openFileCoord(t, dir, Options{})
	defer c.Close()
	if err := c.Commit(&Tx{ID: 2}); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit of the refused recovered committer after a snapshot and a restart = %v, want ErrConflict", err)
	}
}

// A recovered committer refused for a key another holds stays refused after
// the holder ends, another transaction commits the key, and the coordinator
// restarts with no snapshot taken meanwhile. The refusal was only in memory:
// replayed without the holder (its ABORTED logged now), the log let the
// refused one hold the key and its Commit went through, though the key had
// committed since it started (its data persisted before the first crash):
// a lost update.
func TestRecoveredRefusalSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	logCommittersOfOneKey(t, dir, 1, 2)
	c := openFileCoord(t, dir, Options{SnapshotEvery: 1 << 30})
	if err := c.Abort(&Tx{ID: 1}); err != nil {
		t.Fatal(err)
	}
	other := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.CommitWith(other, [][]byte{[]byte("k")}, nil); err != nil {
		t.Fatal(err)
	}
	crash(c)
	c = openFileCoord(t, dir, Options{})
	defer c.Close()
	if err := c.Commit(&Tx{ID: 2}); !errors.Is(err, ErrConflict) {
		t.Fatalf("commit of the refused recovered committer after its key committed and a restart = %v, want ErrConflict", err)
	}
}
