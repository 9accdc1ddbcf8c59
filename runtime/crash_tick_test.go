package runtime_test

import (
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// t_window counts its events in counter win/n<instance>; each Tick emits
// the instance's count so far (if any) and takes it off: a tumbling window,
// flushed by ticks only. The key is the instance's own: counter Adds never
// conflict, so two instances flushing one key could both emit its count.
type windowFlowlet struct{}

func windowKey(ctx flowlet.Context) []byte {
	return strconv.AppendInt([]byte("n"), int64(ctx.Instance()), 10)
}

func (windowFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	return ctx.Counters("win").Add(windowKey(ctx), 1)
}

func (windowFlowlet) Tick(ctx flowlet.Context) error {
	c := ctx.Counters("win")
	n, err := c.Get(windowKey(ctx))
	if err != nil || n == 0 {
		return err
	}
	if err := ctx.Emit("out", strconv.AppendInt(nil, n, 10)); err != nil {
		return err
	}
	return c.Add(windowKey(ctx), -n)
}

// t_sum adds the numbers it receives to counter sum/total.
type sumFlowlet struct{}

func (sumFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	n, err := strconv.ParseInt(string(ev.Payload), 10, 64)
	if err != nil {
		return flowlet.Permanent(err)
	}
	return ctx.Counters("sum").Add([]byte("total"), n)
}

func init() {
	flowlet.Register("t_window", func() flowlet.Flowlet { return windowFlowlet{} }, flowlet.TypeInfo{Outputs: []string{"out"}})
	flowlet.Register("t_sum", func() flowlet.Flowlet { return sumFlowlet{} }, flowlet.TypeInfo{})
}

// TestCrashTicks kills the CLI at random moments at least 20 times while
// windows of two instances are flushed by their ticks; after the drain
// (and its last tick) the sums the ticks emitted add up to the input lines
// exactly, with nothing left in the windows.
func TestCrashTicks(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	dir := t.TempDir()
	const chunk = 12000
	in := &crashInput{path: filepath.Join(dir, "input.txt")}
	in.grow(t, chunk)
	writeApp(t, dir, `
app: crashtick
flowlets:
  reader: {type: file_source, config: {path: input.txt, lines_per_step: 500}}
  win: {type: t_window, instances: 2, batch_size: 200, tick: 2ms}
  sum: {type: t_sum}
connections:
  - {from: reader, to: win, strategy: round_robin}
  - {from: win, to: sum}
`)
	kills := killRuns(t, dir, in, chunk, rand.New(rand.NewPCG(11, 12)))
	finalDrain(t, dir)
	s, err := runtime.OpenStore(filepath.Join(dir, ".flowrun", "crashtick"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var total, left int64
	if err := s.View("crashtick", "sum", func(r runtime.StateReader) error {
		var err error
		total, err = r.Counters("sum").Get([]byte("total"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.View("crashtick", "win", func(r runtime.StateReader) error {
		it := r.Counters("win").Scan(flowletScanAll)
		defer it.Close()
		for it.Next() {
			left += it.Count()
		}
		return it.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if total != int64(in.lines) || left != 0 {
		t.Errorf("the ticks emitted %d events' counts, %d left in the windows; want %d lines, 0 left", total, left, in.lines)
	}
	t.Logf("%d kills; %d lines", kills, in.lines)
}
