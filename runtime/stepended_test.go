package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/testgate"
	"github.com/flowrun/flowrun/runtime"
)

// t_keeper forwards each event on "out" and counts it (n/total), and keeps
// the Context of its first call, with a table, counters and an iterator of
// it (kept); from its second call on it passes keeperGate.
type keeper struct{}

var (
	keeperGate testgate.Gate
	kept       struct {
		ctx flowlet.Context
		tbl flowlet.Table
		cnt flowlet.Counters
		it  flowlet.Iterator
		// done and child: ctx.Done() and a context derived from ctx,
		// taken during the call (a goroutine waiting on them must learn
		// that the step ended).
		done  <-chan struct{}
		child context.Context
		stop  context.CancelFunc
	}
)

func (keeper) Process(ctx flowlet.Context, ev flowlet.Event) error {
	if kept.ctx == nil {
		kept.ctx, kept.tbl, kept.cnt = ctx, ctx.State("t"), ctx.Counters("n")
		kept.it = kept.tbl.Scan(flowlet.ScanOptions{})
		kept.done = ctx.Done()
		kept.child, kept.stop = context.WithCancel(ctx)
	} else {
		keeperGate.Pass()
	}
	if err := ctx.Counters("n").Add([]byte("total"), 1); err != nil {
		return err
	}
	return ctx.Emit("out", ev.Payload)
}

func init() {
	flowlet.Register("t_keeper", func() flowlet.Flowlet { return keeper{} }, flowlet.TypeInfo{Outputs: []string{"out"}})
}

// TestContextAfterStep: a flowlet that uses its Context after the call
// that received it returned (from a goroutine it started) gets
// flowlet.ErrStepEnded from Emit, state reads and writes, dead letters and
// iterators, and a done ctx (cause ErrStepEnded) — as a plugin's Context
// does — and nothing of it reaches the step in flight meanwhile. The
// runtime reused one Context for every step: the late Emit went into the
// next step and committed with it. A Context is of one call, also against
// the next call of the same step.
func TestContextAfterStep(t *testing.T) {
	kept.ctx = nil
	entered, open := keeperGate.Hold(t)
	dir := t.TempDir()
	a, err := runtime.Open(plan(t, dir, `
app: kept
flowlets:
  gen: {type: generator, config: {count: 3, batch: 3}}
  keep: {type: t_keeper, batch_size: 3}
  cnt: {type: t_count}
connections:
  - {from: gen, to: keep}
  - {from: keep.out, to: cnt}
`), runtime.Options{NoSync: true, Drain: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang deadline
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	// The first call returned; the second, of the same step (the three
	// events committed together, keep takes three at a time), is in
	// flight, held: a Context is valid only during its own call.
	<-entered
	c := kept.ctx
	if c.Err() == nil || !errors.Is(context.Cause(c), flowlet.ErrStepEnded) {
		t.Errorf("ctx of an ended step: Err %v, cause %v; want done, cause ErrStepEnded", c.Err(), context.Cause(c))
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done of an ended step's ctx is not closed")
	}
	defer kept.stop()
	select {
	case <-kept.done:
	default:
		t.Error("Done taken during the call is not closed once the call returned")
	}
	if !errors.Is(context.Cause(kept.child), flowlet.ErrStepEnded) {
		t.Errorf("a context derived during the call: cause %v once the call returned, want ErrStepEnded", context.Cause(kept.child))
	}
	_, _, getErr := kept.tbl.Get([]byte("k"))
	_, cntErr := kept.cnt.Get([]byte("total"))
	fresh := kept.tbl.Scan(flowlet.ScanOptions{})
	for what, err := range map[string]error{
		"Emit":              c.Emit("out", []byte("late")),
		"Put":               kept.tbl.Put([]byte("late"), []byte("v")),
		"Delete":            kept.tbl.Delete([]byte("late")),
		"Get":               getErr,
		"Add":               kept.cnt.Add([]byte("total"), 100),
		"counter Get":       cntErr,
		"State(...).Put":    c.State("t").Put([]byte("late"), nil),
		"Counters(...).Add": c.Counters("n").Add([]byte("total"), 100),
		"DeadLetter":        c.(runtime.DeadLetterer).DeadLetter([]byte("late"), "late"),
		"DeadLetterEvent":   c.(runtime.EventDeadLetterer).DeadLetterEvent(flowlet.Event{}, "late"),
	} {
		if !errors.Is(err, flowlet.ErrStepEnded) {
			t.Errorf("%s after the step: %v, want ErrStepEnded", what, err)
		}
	}
	for name, it := range map[string]flowlet.Iterator{"an iterator of the step": kept.it, "a scan after it": fresh} {
		if it.Next() || !errors.Is(it.Err(), flowlet.ErrStepEnded) {
			t.Errorf("%s: Err %v, want ErrStepEnded", name, it.Err())
		}
		it.Close()
	}
	open()
	if err := <-done; err != nil || ctx.Err() != nil {
		t.Fatalf("run: %v (ctx %v)", err, ctx.Err())
	}
	if n := counter(t, a, "keep", "n", "total"); n != 3 {
		t.Errorf("keep counted %d, want 3 (nothing of the kept Context)", n)
	}
	if n := counter(t, a, "cnt", "n", "total"); n != 3 {
		t.Errorf("cnt got %d events, want 3 (no late emit)", n)
	}
	dead := 0
	s := a.Inspect()
	if err := s.DeadLetters("keep", 0, func(runtime.DeadLetter) bool { dead++; return true }); err != nil {
		t.Fatal(err)
	}
	if dead != 0 {
		t.Errorf("%d dead letters of keep, want none", dead)
	}
}
