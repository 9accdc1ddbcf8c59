package runtime

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestTailKeepsOnlyTheNewest: a tail of the newest n entries held a copy
// of every entry it scanned (payloads included) until it sorted them at
// the end: `flowrun queue tail` (no scan bound) of a queue with a large
// backlog read the whole queue into memory to print 10 entries. It now
// holds at most 2n at a time, and returns the same entries as a tail of
// everything cut to its last n.
func TestTailKeepsOnlyTheNewest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(path, []byte(`
app: tail
flowlets:
  gen: {type: generator, config: {count: 600, batch: 7, payload: "e{seq}", keys: {k: "{mod:5}"}}}
  sink: {type: t_take}
connections:
  - {from: gen, to: sink, strategy: hash, key: k, partitions: 4}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	a, err := Open(p, Options{DataDir: data, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Pause("sink"); err != nil { // the events stay in gen.out
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)   // a hang detector
	for a.byName["gen"].st.done.Load() == 0 { // the generator reached its end
		if time.Now().After(deadline) {
			t.Fatalf("the generator did not end: %+v", a.Status())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.Close()

	s, err := OpenStore(data)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, err := s.Tail("gen.out", "k", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 600 {
		t.Fatalf("%d entries in gen.out, want 600", len(all))
	}
	// Without the app file (flowrun queue tail APP-NAME) the key name is
	// the one the store records for the queue: the keys were left out.
	unnamed, err := s.Tail("gen.out", "", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range unnamed {
		if w := all[len(all)-3+i]; len(e.Keys) != 1 || len(w.Keys) != 1 || e.Keys[0] != w.Keys[0] || w.Keys[0].Name != "k" {
			t.Errorf("tail without the key's name: keys %+v, want %+v (name k)", e.Keys, w.Keys)
		}
	}
	defer func() { tailRetained = nil }()
	for _, n := range []int{1, 3, 10, 599, 600, 1000} {
		most := 0
		tailRetained = func(k int) { most = max(most, k) }
		got, err := s.Tail("gen.out", "k", n, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := all[max(0, len(all)-n):]
		if !slices.EqualFunc(got, want, func(x, y EntryJSON) bool { return x.ID == y.ID && x.Enqueued.Equal(y.Enqueued) }) {
			t.Errorf("tail %d: %d entries, not the last %d of the whole queue's", n, len(got), len(want))
		}
		if most > 2*n {
			t.Errorf("tail %d held %d entries at once, want at most %d", n, most, 2*n)
		}
	}

	// A byte bound: the newest entries that fit, truncated, and no more
	// than twice the bound held while scanning.
	size := func(es []EntryJSON) int {
		n := 0
		for _, e := range es {
			n += len(e.Payload.Raw()) + keysSize(e.Keys) + len(e.ID) + len(e.TraceID) + listOverhead
		}
		return n
	}
	bound := size(all[:50])
	for _, n := range []int{0, 10, 100} {
		most := 0
		tailRetained = func(k int) { most = max(most, k) }
		got, truncated, err := s.TailBounded("gen.out", "k", n, 0, bound, QueueSelect{})
		if err != nil {
			t.Fatal(err)
		}
		want := all[max(0, len(all)-n):]
		if n == 0 {
			want = all
		}
		if len(got) > len(want) || !slices.EqualFunc(got, want[len(want)-len(got):], func(x, y EntryJSON) bool { return x.ID == y.ID }) {
			t.Errorf("bounded tail %d: %d entries, not the newest", n, len(got))
		}
		if sz := size(got); sz > bound || truncated != (len(got) < len(want)) || (n != 10 && !truncated) || len(got) < min(40, len(want)) {
			t.Errorf("bounded tail %d: %d entries of %d bytes (bound %d), truncated %v", n, len(got), sz, bound, truncated)
		}
		if most*listOverhead > 2*bound+listOverhead*10 {
			t.Errorf("bounded tail %d held %d entries at once, over twice the bound", n, most)
		}
	}
}
