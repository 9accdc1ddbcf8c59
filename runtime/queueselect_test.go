package runtime_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// queue tail's selections (HQueue's partition and range scanners): some
// partitions, a range of write pointers, a range of enqueue times; a
// partition the queue does not have is an error.
func TestTailSelect(t *testing.T) {
	dir := t.TempDir()
	a, err := runtime.Open(plan(t, dir, `
app: t
flowlets:
  gen: {type: generator, config: {count: 0}}
  c: {type: t_count}
connections:
  - {from: gen, to: c, partitions: 4}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 3 { // three transactions, not consumed: the app does not run
		evs := make([]runtime.IngestEvent, 300) // 2 runs of 256: 2 partitions each
		for j := range evs {
			evs[j].Payload = fmt.Appendf(nil, "t%d-%d", i, j)
		}
		if _, err := a.Ingest(context.Background(), "c", "", evs); err != nil {
			t.Fatal(err)
		}
	}
	s := a.Inspect()
	all, err := s.TailSelect("gen.out", "", 0, 0, runtime.QueueSelect{})
	if err != nil || len(all) != 900 {
		t.Fatalf("all: %d entries, %v", len(all), err)
	}
	// Write pointers of the three transactions, from the ids.
	var ptrs []uint64
	seen := map[uint64]bool{}
	for _, e := range all {
		var p uint64
		fmt.Sscan(strings.Split(strings.Split(e.ID, "/")[2], ".")[0], &p)
		if !seen[p] {
			seen[p] = true
			ptrs = append(ptrs, p)
		}
	}
	slices.Sort(ptrs)
	if len(ptrs) != 3 {
		t.Fatalf("write pointers %v, want 3", ptrs)
	}
	count := func(sel runtime.QueueSelect, check func(runtime.EntryJSON) bool) int {
		t.Helper()
		es, err := s.TailSelect("gen.out", "", 0, 0, sel)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if !check(e) {
				t.Fatalf("entry %s outside the selection %+v", e.ID, sel)
			}
		}
		return len(es)
	}
	if n := count(runtime.QueueSelect{Partitions: []int{0, 2}}, func(e runtime.EntryJSON) bool {
		return strings.HasPrefix(e.ID, "0/") || strings.HasPrefix(e.ID, "2/")
	}); n == 0 || n == 900 {
		t.Errorf("partitions 0 and 2: %d entries", n)
	}
	mid := ptrs[1]
	if n := count(runtime.QueueSelect{From: mid, To: mid}, func(e runtime.EntryJSON) bool {
		return strings.Contains(string(e.Payload.Raw()), "t1-")
	}); n != 300 {
		t.Errorf("the middle transaction's pointer: %d entries, want 300", n)
	}
	if n := count(runtime.QueueSelect{Since: time.Now().Add(time.Hour)}, nil); n != 0 {
		t.Errorf("since an hour from now: %d entries", n)
	}
	if n := count(runtime.QueueSelect{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)}, func(runtime.EntryJSON) bool { return true }); n != 900 {
		t.Errorf("the last hour: %d entries", n)
	}
	if _, err := s.TailSelect("gen.out", "", 0, 0, runtime.QueueSelect{Partitions: []int{4}}); err == nil || !strings.Contains(err.Error(), "partition 4 not in [0, 4)") {
		t.Errorf("partition 4 of 4: %v", err)
	}
}
