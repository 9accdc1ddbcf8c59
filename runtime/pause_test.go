package runtime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/testgate"
	"github.com/flowrun/flowrun/runtime"
)

// t_block counts its events (counter n/total) and, before each, passes
// theBlock: a test that holds it keeps steps in flight (one test at a time
// uses it).
var theBlock testgate.Gate

func init() {
	flowlet.Register("t_block", func() flowlet.Flowlet { return testgate.Counting(&theBlock) }, flowlet.TypeInfo{})
}

// TestWaitPaused: a paused flowlet is parked (Status, WaitPaused) only once
// its step in flight is done, and a resume ends the wait with ErrNotPaused.
func TestWaitPaused(t *testing.T) {
	dir := t.TempDir()
	a := runApp(t, plan(t, dir, `
app: pause
flowlets:
  gen: {type: generator, config: {rate: 500, batch: 10}}
  blk: {type: t_block, batch_size: 1}
connections:
  - {from: gen, to: blk}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	ctx := context.Background()
	// Held from the next step on; opened at the latest by a cleanup that
	// runs before the app's (no step stays held while the app stops).
	entered, open := theBlock.Hold(t)

	if err := a.WaitPaused(ctx, "blk"); !errors.Is(err, runtime.ErrNotPaused) {
		t.Errorf("WaitPaused of a running flowlet: %v, want ErrNotPaused", err)
	}
	if err := a.WaitPaused(ctx, "nope"); !errors.Is(err, runtime.ErrUnknownFlowlet) {
		t.Errorf("WaitPaused of an unknown flowlet: %v", err)
	}

	// A step in flight: paused, not parked until it is done.
	<-entered
	if err := a.Pause("blk"); err != nil {
		t.Fatal(err)
	}
	if f := flowletStatus(a.Status(), "blk"); !f.Paused || f.Parked || f.Busy != 1 {
		t.Errorf("paused with a step in flight: %+v", f)
	}
	waited := make(chan error, 1)
	go func() { waited <- a.WaitPaused(ctx, "blk") }()
	select {
	case err := <-waited:
		t.Fatalf("WaitPaused returned (%v) while a step was in flight", err)
	default:
	}
	open()
	if err := <-waited; err != nil {
		t.Fatalf("WaitPaused: %v", err)
	}
	f := flowletStatus(a.Status(), "blk")
	if !f.Paused || !f.Parked || f.Busy != 0 || f.Processed == 0 {
		t.Errorf("parked: %+v", f)
	}
	if n := counter(t, a, "blk", "n", "total"); n != int64(f.Processed) {
		t.Errorf("parked after %d events processed, %d counted", f.Processed, n)
	}
	// An instance added while paused parks as well.
	if _, err := a.Scale(ctx, "blk", 2); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitPaused(ctx, "blk"); err != nil {
		t.Fatalf("WaitPaused after a scale: %v", err)
	}
	if g := flowletStatus(a.Status(), "blk"); g.Processed != f.Processed || !g.Parked || g.Instances != 2 {
		t.Errorf("paused, scaled: %+v, parked before %+v", g, f)
	}

	// A source parks too.
	if err := a.Pause("gen"); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitPaused(ctx, "gen"); err != nil {
		t.Fatalf("WaitPaused of the source: %v", err)
	}
	if g := flowletStatus(a.Status(), "gen"); !g.Parked || g.Busy != 0 {
		t.Errorf("paused source: %+v", g)
	}
	if err := a.Resume("gen"); err != nil {
		t.Fatal(err)
	}

	// Resumed while a wait is on: the wait ends with ErrNotPaused.
	entered, open = theBlock.Hold(t)
	if err := a.Resume("blk"); err != nil {
		t.Fatal(err)
	}
	<-entered
	if err := a.Pause("blk"); err != nil {
		t.Fatal(err)
	}
	go func() { waited <- a.WaitPaused(ctx, "blk") }()
	if err := a.Resume("blk"); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, runtime.ErrNotPaused) {
		t.Errorf("WaitPaused ended by a resume: %v, want ErrNotPaused", err)
	}
	if f := flowletStatus(a.Status(), "blk"); f.Paused || f.Parked {
		t.Errorf("resumed: %+v", f)
	}
	open()
}

// t_ticker counts its events (counter n/events) and its ticks (n/ticks).
type tickerFlowlet struct{}

func (tickerFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	return ctx.Counters("n").Add([]byte("events"), 1)
}

func (tickerFlowlet) Tick(ctx flowlet.Context) error {
	return ctx.Counters("n").Add([]byte("ticks"), 1)
}

func init() {
	flowlet.Register("t_ticker", func() flowlet.Flowlet { return tickerFlowlet{} }, flowlet.TypeInfo{})
}

// TestDrainPausedTicker: a flowlet paused from the start runs no tick but
// drain's last one, which it runs paused (before, it waited for a resume
// and the drain for it, forever), and stays parked.
func TestDrainPausedTicker(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(input, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := runtime.Open(plan(t, dir, `
app: ptick
flowlets:
  src: {type: file_source, config: {path: `+input+`}}
  tk: {type: t_ticker, tick: 1ms}
connections:
  - {from: src, to: tk}
`), runtime.Options{NoSync: true, Drain: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Pause("tk"); err != nil {
		t.Fatal(err)
	}
	// A hang detector, not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("not drained: %+v", a.Status())
	}
	if n := counter(t, a, "tk", "n", "ticks"); n != 1 {
		t.Errorf("%d ticks, want 1 (drain's last)", n)
	}
	if f := flowletStatus(a.Status(), "tk"); !f.Paused || !f.Parked || f.Busy != 0 {
		t.Errorf("tk after the drain: %+v", f)
	}
}
