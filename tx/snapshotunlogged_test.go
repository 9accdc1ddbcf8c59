package tx

import (
	"slices"
	"testing"
	"time"
)

// A short transaction before its CanCommit is not in the log (it has
// persisted nothing), so an abort writes nothing. A snapshot taken while it
// ran listed it in progress all the same: aborted after the snapshot, it
// came back in progress at the next restart and stayed so until its
// timeout, excluded from every snapshot and holding back pruning. A
// snapshot lists only what the log knows, as the log without it would.
func TestSnapshotLeavesOutUnloggedShort(t *testing.T) {
	dir := t.TempDir()
	c := openFileCoord(t, dir, Options{})
	aborted := must[*Tx](t)(c.StartShort(time.Hour))
	running := must[*Tx](t)(c.StartShort(time.Hour))
	long := must[*Tx](t)(c.StartLong()) // logged from its start: kept
	if err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(aborted); err != nil {
		t.Fatal(err)
	}
	commitN(t, c, 1)
	crash(c)
	c2 := openFileCoord(t, dir, Options{})
	defer c2.Close()
	if got := c2.InProgress(); !slices.Equal(got, []uint64{long.ID}) {
		t.Fatalf("in progress after recovery = %v, want [%d] (aborted %d, running %d)", got, long.ID, aborted.ID, running.ID)
	}
	if tx := must[*Tx](t)(c2.StartShort(time.Minute)); tx.ID <= max(running.ID, long.ID) {
		t.Fatalf("pointer went back: %d", tx.ID)
	}
}
