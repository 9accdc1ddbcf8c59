package queuetest

import (
	"testing"

	"github.com/flowrun/flowrun/queue"
)

// testScanDuplicatePartitions: a partition listed twice in
// ScanOptions.Partitions is scanned once (it returned every entry twice),
// and the entries come in partition order whatever the list's order.
func testScanDuplicatePartitions(t *testing.T, e *Env) {
	must(t, e.Queues.CreateQueue("q", queue.Config{Partitions: 4}))
	key := func(i int) []byte { return []byte{byte(i)} }
	produce(t, e, "q", "e", 40, 10, key)
	count := func(parts []int) (n int, inOrder bool) {
		t.Helper()
		last := -1
		inOrder = true
		must(t, e.Queues.Scan("q", queue.ScanOptions{Partitions: parts}, func(en queue.Entry) bool {
			n++
			if en.ID.Partition < last {
				inOrder = false
			}
			last = en.ID.Partition
			return true
		}))
		return n, inOrder
	}
	all, _ := count(nil)
	if all != 40 {
		t.Fatalf("scan of all partitions: %d entries, want 40", all)
	}
	one, _ := count([]int{2})
	two, _ := count([]int{0, 2})
	if one == 0 || two <= one {
		t.Fatalf("setup: %d entries in partition 2, %d in 0 and 2", one, two)
	}
	if n, _ := count([]int{2, 2}); n != one {
		t.Fatalf("partitions [2 2]: %d entries, want %d", n, one)
	}
	if n, ok := count([]int{2, 0, 2, 0}); n != two || !ok {
		t.Fatalf("partitions [2 0 2 0]: %d entries (in partition order: %v), want %d in order", n, ok, two)
	}
	if n, _ := count([]int{3, 2, 1, 0, 0, 1, 2, 3}); n != 40 {
		t.Fatalf("every partition twice: %d entries, want 40", n)
	}
}
