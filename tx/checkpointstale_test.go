package tx

import (
	"slices"
	"testing"
)

// Checkpoint with a Tx that an earlier checkpoint replaced: the new Tx must
// still own every pointer the transaction wrote with, or it hides its own
// writes from itself (the coordinator commits or invalidates them all).
func TestCheckpointWithSupersededTx(t *testing.T) {
	c := mustOpen(t, Options{})
	long := must[*Tx](t)(c.StartLong())
	cp1 := must[*Tx](t)(c.Checkpoint(long))
	cp2 := must[*Tx](t)(c.Checkpoint(long)) // long, not cp1
	for _, p := range []uint64{long.ID, cp1.WritePointer, cp2.WritePointer} {
		if !cp2.Visible(p) || !cp2.Owns(p) {
			t.Errorf("pointer %d of the transaction is not its own in %v (checkpoints %v)", p, cp2, cp2.Checkpoints)
		}
	}
	if want := []uint64{long.ID, cp1.WritePointer, cp2.WritePointer}; !slices.Equal(cp2.AllWritePointers(), want) {
		t.Errorf("AllWritePointers = %v, want %v", cp2.AllWritePointers(), want)
	}
}
