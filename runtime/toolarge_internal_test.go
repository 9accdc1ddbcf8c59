package runtime

import (
	"testing"

	"github.com/flowrun/flowrun/planner"
)

// After a too-large step of n events the batch size is n/2 (at least 1),
// and it doubles back to batch_size after limitRestoreAfter commits at
// each reduced size; a commit at the full size changes nothing.
func TestBatchLimit(t *testing.T) {
	in := &instance{fl: &planner.Flowlet{BatchSize: 100}}
	commits := func(n int) {
		for range n {
			in.committedAtLimit()
		}
	}
	commits(20)
	if got := in.batchLimit(); got != 100 {
		t.Fatalf("limit %d before any too-large step, want 100", got)
	}
	in.shrink(100)
	in.shrink(in.batchLimit())
	in.shrink(3)
	if got := in.batchLimit(); got != 1 {
		t.Fatalf("limit %d after shrinking 100 → 50 → 25 and a too-large step of 3, want 1", got)
	}
	in.shrink(1)
	if got := in.batchLimit(); got != 1 {
		t.Fatalf("limit %d, want at least 1", got)
	}
	want := []int{1, 2, 4, 8, 16, 32, 64, 100}
	for i, w := range want {
		if got := in.batchLimit(); got != w {
			t.Fatalf("step %d of the restore: limit %d, want %d", i, got, w)
		}
		commits(limitRestoreAfter - 1)
		if got := in.batchLimit(); got != w && i < len(want)-1 {
			t.Fatalf("limit %d after %d commits, want still %d", got, limitRestoreAfter-1, w)
		}
		commits(1)
	}
	if in.limit != 0 {
		t.Errorf("limit %d after the restore, want 0 (batch_size)", in.limit)
	}
}
