package tx

import (
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A long transaction's START is appended unwaited and, in a BadgerLog, rides
// in whichever waited batch comes next — possibly another transaction's
// commit, whose Badger write can land after (or, at a crash, not at all
// while) the long transaction's own later checkpoint lands. Recovery must
// still know the long transaction and its checkpoint pointer: data persisted
// under it must stay invisible.
func TestLongStartNotOnlyInAnotherBatch(t *testing.T) {
	db := openBadger(t, t.TempDir(), false)
	defer db.Close()
	open := func() *Coordinator {
		l, err := NewBadgerLog(db, BadgerLogOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Open(Options{Log: l, ExpiryInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := open()
	bl := c.log.(*BadgerLog)
	long := must[*Tx](t)(c.StartLong())
	t1 := must[*Tx](t)(c.StartShort(time.Minute))
	before := bl.seq
	if err := c.CommitWith(t1, [][]byte{[]byte("a")}, nil); err != nil {
		t.Fatal(err)
	}
	if bl.seq != before+1 {
		t.Fatalf("t1's commit took %d log entries", bl.seq-before)
	}
	cp := must[*Tx](t)(c.Checkpoint(long)) // the batch may persist under cp.WritePointer now
	t2 := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.CommitWith(t2, [][]byte{[]byte("b")}, nil); err != nil {
		t.Fatal(err)
	}
	crash(c)
	// t1's batch, which carried the long transaction's START, never landed.
	if err := db.Update(func(txn *badger.Txn) error { return txn.Delete(bl.logKey(before)) }); err != nil {
		t.Fatal(err)
	}
	c2 := open()
	defer c2.Close()
	if !slices.Contains(c2.InProgress(), long.ID) {
		t.Fatalf("long transaction %d lost: in progress %v", long.ID, c2.InProgress())
	}
	r := must[*Tx](t)(c2.StartShort(time.Minute))
	if r.Visible(cp.WritePointer) || r.Visible(long.ID) {
		t.Fatalf("a recovered long transaction's pointers %d, %d are visible to %v", long.ID, cp.WritePointer, r)
	}
}
