package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
	_ "github.com/flowrun/flowrun/runtime/builtin"
)

// Test flowlet types.
//
// t_count counts each event: counter "n" key "total", and counter "seen" key
// payload. Config: fail (payload substring: always an error), panic
// (substring: panic), flaky (substring: fail the first `flaky_times`
// attempts of each such event), emit (bool: forward the payload on "out"
// keyed by key `key`).
type countFlowlet struct {
	fail, panic, flaky string
	flakyTimes         int
	emit               bool
	key                string
	ignoreEmitErr      bool
	badWrite           string // "put", "delete" or "add": one more write with an oversized key, its error ignored; "scan", "count_scan": a scan of a bad name, its error ignored
}

var flakyMu sync.Mutex
var flakySeen = map[string]int{}

// resetFlaky forgets the attempts counted by "flaky" flowlets, so that a
// test starts afresh (go test -count=N runs it again in the same process).
func resetFlaky() {
	flakyMu.Lock()
	clear(flakySeen)
	flakyMu.Unlock()
}

func (c *countFlowlet) Init(ic flowlet.InitContext) error {
	cf := ic.Config
	c.fail, _ = cf.String("fail", "")
	c.panic, _ = cf.String("panic", "")
	c.flaky, _ = cf.String("flaky", "")
	c.flakyTimes, _ = cf.Int("flaky_times", 1)
	c.emit, _ = cf.Bool("emit", false)
	c.key, _ = cf.String("key", "")
	c.ignoreEmitErr, _ = cf.Bool("ignore_emit_err", false)
	c.badWrite, _ = cf.String("bad_write", "")
	if v, _ := cf.String("init_error", ""); v != "" {
		return errors.New(v)
	}
	return nil
}

func (c *countFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	p := string(ev.Payload)
	if err := ctx.Counters("n").Add([]byte("total"), 1); err != nil {
		return err
	}
	if err := ctx.Counters("seen").Add(ev.Payload, 1); err != nil {
		return err
	}
	if err := ctx.State("last").Put([]byte(ctx.Name()), ev.Payload); err != nil {
		return err
	}
	tooLong := make([]byte, flowlet.MaxKeySize+1)
	switch c.badWrite { // the error ignored, as a careless flowlet would
	case "put":
		_ = ctx.State("last").Put(tooLong, ev.Payload)
	case "delete":
		_ = ctx.State("last").Delete(tooLong)
	case "add":
		_ = ctx.Counters("n").Add(tooLong, 1)
	case "scan":
		it := ctx.State("Bad Name").Scan(flowlet.ScanOptions{})
		for it.Next() {
		}
		_ = it.Close()
	case "count_scan":
		it := ctx.Counters("Bad Name").Scan(flowlet.ScanOptions{})
		for it.Next() {
		}
		_ = it.Close()
	}
	if c.fail != "" && strings.Contains(p, c.fail) {
		return fmt.Errorf("refusing %q", p)
	}
	if c.panic != "" && strings.Contains(p, c.panic) {
		var m map[string]int
		m["boom"]++ // nil map write
	}
	if c.flaky != "" && strings.Contains(p, c.flaky) {
		flakyMu.Lock()
		flakySeen[ctx.Name()+"/"+p]++
		n := flakySeen[ctx.Name()+"/"+p]
		flakyMu.Unlock()
		if n <= c.flakyTimes {
			return fmt.Errorf("flaky %q attempt %d", p, n)
		}
	}
	if c.emit {
		var opts []flowlet.EmitOption
		if c.key != "" {
			opts = append(opts, flowlet.Key(c.key, p))
		}
		err := ctx.Emit("out", ev.Payload, opts...)
		if c.ignoreEmitErr {
			return nil
		}
		return err
	}
	return nil
}

func init() {
	flowlet.Register("t_count", func() flowlet.Flowlet { return &countFlowlet{} }, flowlet.TypeInfo{})
}

func writeApp(t testing.TB, dir, yaml string) string {
	t.Helper()
	p := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func plan(t testing.TB, dir, yaml string) *planner.Plan {
	t.Helper()
	p, err := runtime.ParseFile(writeApp(t, dir, yaml))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runDrain runs the app until drained (or the timeout) and returns it closed.
func runDrain(t testing.TB, dir, yaml string, opts runtime.Options) *runtime.App {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(dir, "data")
	}
	opts.Drain = true
	a, err := runtime.Open(plan(t, dir, yaml), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("app did not drain: %+v", a.Status())
	}
	return a
}

// runApp opens p and runs it in the background until the test ends; the
// cleanup stops the run (an error from Run fails the test) and closes the app.
func runApp(t testing.TB, p *planner.Plan, opts runtime.Options) *runtime.App {
	t.Helper()
	a, err := runtime.Open(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() }) // after the run stopped
	runtime.RunInBackground(t, a)
	return a
}

func counter(t testing.TB, a *runtime.App, fl, table, key string) int64 {
	t.Helper()
	var n int64
	err := a.View(fl, func(r runtime.StateReader) error {
		var err error
		n, err = r.Counters(table).Get([]byte(key))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func deadLetters(t testing.TB, dir, fl string) []runtime.DeadLetter {
	t.Helper()
	s, err := runtime.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []runtime.DeadLetter
	if err := s.DeadLetters(fl, 0, func(d runtime.DeadLetter) bool { out = append(out, d); return true }); err != nil {
		t.Fatal(err)
	}
	return out
}

// replayDeadLetters replays fl's dead letters in the store in dir (the app
// must not be running).
func replayDeadLetters(t testing.TB, dir, fl string, inputs map[string]string) (replayed, kept int, err error) {
	t.Helper()
	s, err := runtime.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return s.ReplayDeadLetters(fl, inputs)
}

var flowletScanAll = flowlet.ScanOptions{}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}
