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
	s := threeTransactions(t)
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

// threeTransactions opens an app (not run) whose queue gen.out holds three
// ingested transactions of 300 events over 4 partitions, and inspects it.
func threeTransactions(t *testing.T) *runtime.Store {
	t.Helper()
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
	t.Cleanup(func() { a.Close() })
	for i := range 3 { // three transactions, not consumed: the app does not run
		evs := make([]runtime.IngestEvent, 300) // 2 runs of 256: 2 partitions each
		for j := range evs {
			evs[j].Payload = fmt.Appendf(nil, "t%d-%d", i, j)
		}
		if _, err := a.Ingest(context.Background(), "c", "", evs); err != nil {
			t.Fatal(err)
		}
	}
	return a.Inspect()
}

// Bounds given to tail are read strictly, and none may select more than
// asked: "abc/5" and "5.x" were read as pointer 5, year 1 as an --until
// was the zero time (no bound) and listed everything, and a count over
// MaxInt/2 wrapped and panicked; a --to of 0 (To 0 is no bound) listed
// everything.
func TestTailBoundsStrict(t *testing.T) {
	for _, v := range []string{"abc/5", "5.x", "1/2/3", "1/2/3.4", "1/300/3.4.5", "1/2/3.4.5.6", "-1", "x", "1//3.4.5", "70000/0/1.0.0"} {
		if p, err := runtime.ParsePointer(v); err == nil {
			t.Errorf("ParsePointer(%q) = %d, want an error", v, p)
		}
	}
	for v, want := range map[string]uint64{"": 0, "1042": 1042, "3/0/1042.0.7": 1042, "0/255/18446744073709551615.4294967295.0": 1<<64 - 1} {
		if p, err := runtime.ParsePointer(v); err != nil || p != want {
			t.Errorf("ParsePointer(%q) = %d, %v; want %d", v, p, err, want)
		}
	}
	for _, v := range []string{"0", "3/0/0.0.0"} {
		if p, err := runtime.ParseUpperPointer(v); err == nil {
			t.Errorf("ParseUpperPointer(%q) = %d, want an error (To 0 is no bound)", v, p)
		}
	}
	for v, want := range map[string]uint64{"": 0, "1042": 1042} {
		if p, err := runtime.ParseUpperPointer(v); err != nil || p != want {
			t.Errorf("ParseUpperPointer(%q) = %d, %v; want %d", v, p, err, want)
		}
	}
	s := threeTransactions(t)
	yearOne, err := runtime.ParseInstant("0001-01-01T00:00:00Z", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if es, err := s.TailSelect("gen.out", "", 0, 0, runtime.QueueSelect{Until: yearOne}); err != nil || len(es) != 0 {
		t.Errorf("until year 1: %d entries, %v; want none", len(es), err)
	}
	if es, err := s.TailSelect("gen.out", "", 0, 0, runtime.QueueSelect{Since: yearOne}); err != nil || len(es) != 900 {
		t.Errorf("since year 1: %d entries, %v; want all 900", len(es), err)
	}
	if es, _, err := s.TailBounded("gen.out", "", 1<<62, 0, 0, runtime.QueueSelect{}); err != nil || len(es) != 900 {
		t.Errorf("tail of 2^62: %d entries, %v; want all 900", len(es), err)
	}
}
