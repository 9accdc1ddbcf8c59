package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/testgate"
)

// TestViewOutlivesTimeoutHoldsGC: a read of a running app's state (View,
// App.Inspect) that first reads after its transaction timed out reads the
// state as of its start, whatever state GC did meanwhile. The coordinator
// took the timed-out transaction for gone, the GC watermark passed its
// snapshot, and GC folded a later commit's counter delta with the one the
// snapshot sees into a base it does not: the read gave 0, not 1. (Reads
// after the first one are safe: they share the first one's Badger
// snapshot, which GC's deletions do not change.)
//
// GC runs while a newer read is in progress too: the bound is the oldest
// read's (a newer read's bound passes the older one's snapshot).
func TestViewOutlivesTimeoutHoldsGC(t *testing.T) {
	a, ctx := runViewGCApp(t, time.Millisecond)
	err := a.View("c", func(r StateReader) error {
		expireReads(t, a, 1) // the coordinator takes the read for gone
		// A commit after the read's start, then GC as the app runs it (the
		// watermark takes a candidate, then hands it out) while a newer
		// read, which sees that commit, is in progress, timed out too.
		if _, err := a.Ingest(ctx, "c", "", []IngestEvent{{Payload: []byte("x")}}); err != nil {
			return err
		}
		waitCount(t, a, 2)
		if err := a.View("c", func(StateReader) error {
			expireReads(t, a, 2)
			a.gcState()
			a.gcState()
			return nil
		}); err != nil {
			return err
		}
		return wantCountAtStart(t, r)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestViewReleasesGCHold: a state read lets go of its hold on state GC
// when it ends, however it ends (fn returns, fails or panics); a hold left
// behind would keep GC under its snapshot for the rest of the run.
func TestViewReleasesGCHold(t *testing.T) {
	a, _ := runViewGCApp(t, viewTimeout)
	errRead := errors.New("a failed read (test)")
	for _, how := range []string{"returns", "fails", "panics"} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic: %v", p)
				}
			}()
			return a.View("c", func(StateReader) error {
				if a.st.gcHold() == 0 {
					t.Errorf("%s: the read holds no GC bound", how)
				}
				switch how {
				case "fails":
					return errRead
				case "panics":
					panic(how)
				}
				return nil
			})
		}()
		if want := map[string]error{"fails": errRead}[how]; how != "panics" && !errors.Is(err, want) {
			t.Errorf("%s: View: %v, want %v", how, err, want)
		}
		if h := a.st.gcHold(); h != 0 {
			t.Errorf("the read %s, and state GC is still held under %d", how, h)
		}
	}
}

// expireReads waits until the transactions of the n state reads in
// progress timed out (viewTimeout) and the coordinator ended them.
func expireReads(t *testing.T, a *App, n int) {
	t.Helper()
	var reads []uint64
	a.st.useMu.Lock()
	for v := range a.st.views {
		reads = append(reads, v.ID)
	}
	a.st.useMu.Unlock()
	if len(reads) != n {
		t.Fatalf("%d state reads in progress (store.views), want %d", len(reads), n)
	}
	pollUntil(t, "the reads' transactions to time out", func() bool {
		a.st.coord.ExpireTimedOut()
		live := a.st.coord.InProgress()
		return !slices.ContainsFunc(reads, func(id uint64) bool { return slices.Contains(live, id) })
	})
}

// TestViewHoldsGCAtFirstInProgress: the bound a read holds state GC to is
// its snapshot's first transaction in progress, not its own: a step in
// flight when the read started commits after it, below its id, and the
// read must not see that step's counter delta folded into a base with the
// one before.
func TestViewHoldsGCAtFirstInProgress(t *testing.T) {
	a, ctx := runViewGCApp(t, time.Millisecond)
	entered, open := viewGCGate.Hold(t)
	if _, err := a.Ingest(ctx, "c", "", []IngestEvent{{Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	<-entered // c's step for it is in flight
	err := a.View("c", func(r StateReader) error {
		expireReads(t, a, 1)
		open() // the step commits, below the read's id
		waitCount(t, a, 2)
		a.gcState()
		a.gcState()
		return wantCountAtStart(t, r)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// viewGCGate holds the steps of runViewGCApp's c (t_viewgc) while a test
// holds it.
var viewGCGate testgate.Gate

func init() {
	flowlet.Register("t_viewgc", func() flowlet.Flowlet { return testgate.Counting(&viewGCGate) }, flowlet.TypeInfo{})
}

// wantCountAtStart checks that the read r of runViewGCApp's c gives the
// count as of its start: 1.
func wantCountAtStart(t *testing.T, r StateReader) error {
	t.Helper()
	n, err := r.Counters("n").Get([]byte("total"))
	if err != nil {
		return err
	}
	if n != 1 {
		t.Errorf("the read gave %d, want 1: the count at its start", n)
	}
	return nil
}

// runViewGCApp runs (until the test ends) an app whose c counted one event
// (n/total; its steps pass viewGCGate), with state GC run only by the test
// and state reads timing out after timeout (viewTimeout, until the test
// ends), and returns it with Run's context.
func runViewGCApp(t *testing.T, timeout time.Duration) (*App, context.Context) {
	t.Helper()
	old := viewTimeout
	viewTimeout = timeout
	t.Cleanup(func() { viewTimeout = old }) // after the app stopped
	// GC runs when the test says.
	a := openYAML(t, viewGCAppYAML, Options{NoSync: true, GCInterval: time.Hour})
	ctx := runInBackground(t, a)
	waitCount(t, a, 1)
	return a, ctx
}

// viewGCAppYAML: a generator's one event, counted by c (t_viewgc) in its
// counter n/total (waitCount).
const viewGCAppYAML = `
app: viewgc
flowlets:
  gen: {type: generator, config: {count: 1}}
  c: {type: t_viewgc}
connections:
  - {from: gen, to: c}
`

// waitCount waits until c's counter n/total of a running app is n.
func waitCount(t *testing.T, a *App, n int64) {
	t.Helper()
	pollUntil(t, "c to count the events", func() bool { return countOf(t, a, "c", "n", "total") == n })
}
