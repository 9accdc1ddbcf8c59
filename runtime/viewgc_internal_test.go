package runtime

import (
	"slices"
	"testing"
	"time"
)

// TestViewOutlivesTimeoutHoldsGC: a read of a running app's state (View,
// App.Inspect) that first reads after its transaction timed out reads the
// state as of its start, whatever state GC did meanwhile. The coordinator
// took the timed-out transaction for gone, the GC watermark passed its
// snapshot, and GC folded a later commit's counter delta with the one the
// snapshot sees into a base it does not: the read gave 0, not 1. (Reads
// after the first one are safe: they share the first one's Badger
// snapshot, which GC's deletions do not change.)
func TestViewOutlivesTimeoutHoldsGC(t *testing.T) {
	old := viewTimeout
	viewTimeout = time.Millisecond
	defer func() { viewTimeout = old }()
	a := openYAML(t, `
app: viewgc
flowlets:
  gen: {type: generator, config: {count: 1}}
  c: {type: t_count}
connections:
  - {from: gen, to: c}
`, Options{NoSync: true, GCInterval: time.Hour}) // GC runs when the test says
	ctx := runInBackground(t, a)
	waitCount(t, a, 1)
	err := a.View("c", func(r StateReader) error {
		// The read's transaction times out: the coordinator ends it.
		var read uint64
		a.st.viewMu.Lock()
		for v := range a.st.views {
			read = v.ID
		}
		a.st.viewMu.Unlock()
		pollUntil(t, "the read's transaction to time out", func() bool {
			a.st.coord.ExpireTimedOut()
			return !slices.Contains(a.st.coord.InProgress(), read)
		})
		// A commit after the read's start, then GC as the app runs it (the
		// watermark takes a candidate, then hands it out).
		if _, err := a.Ingest(ctx, "c", "", []IngestEvent{{Payload: []byte("x")}}); err != nil {
			return err
		}
		waitCount(t, a, 2)
		a.gcState()
		a.gcState()
		n, err := r.Counters("n").Get([]byte("total"))
		if err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("the read gave %d, want 1: the count at its start", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitCount waits until c's counter n/total of a running app is n.
func waitCount(t *testing.T, a *App, n int64) {
	t.Helper()
	pollUntil(t, "c to count the events", func() bool { return countOf(t, a, "c", "n", "total") == n })
}

// pollUntil polls cond until it holds; a minute without fails the test
// (a hang detector, not a timing assertion).
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	hang := time.After(time.Minute)
	for !cond() {
		select {
		case <-hang:
			t.Fatalf("no %s in a minute", what)
		case <-time.After(time.Millisecond):
		}
	}
}
