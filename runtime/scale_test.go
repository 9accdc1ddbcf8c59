package runtime_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// t_seq consumes "KEY SEQ" payloads (keyed by KEY) and checks, inside its
// transaction, that each key's sequence numbers arrive increasing: state
// "last" holds the last SEQ per key, counter "bad" counts violations,
// counters "count" (per key) and "seen" (per SEQ) count deliveries. All of
// it commits with the step, so only committed observations count.
type seqFlowlet struct{}

func (seqFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	k, s, ok := strings.Cut(string(ev.Payload), " ")
	if !ok {
		return fmt.Errorf("bad payload %q", ev.Payload)
	}
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return err
	}
	last := ctx.State("last")
	old, ok, err := last.Get([]byte(k))
	if err != nil {
		return err
	}
	if ok && binary.BigEndian.Uint64(old) >= seq {
		if err := ctx.Counters("bad").Add([]byte(k), 1); err != nil {
			return err
		}
	}
	if err := last.Put([]byte(k), binary.BigEndian.AppendUint64(nil, seq)); err != nil {
		return err
	}
	if err := ctx.Counters("count").Add([]byte(k), 1); err != nil {
		return err
	}
	return ctx.Counters("seen").Add([]byte(s), 1)
}

func init() {
	flowlet.Register("t_seq", func() flowlet.Flowlet { return seqFlowlet{} }, flowlet.TypeInfo{})
}

// t_gated emits "KEY SEQ" events (SEQ = 0, 1, …, count-1; KEY = SEQ mod
// keys, also the event's key "k"), batch per step, but only up to the limit
// of its gate (config gate: a name from newGate), which the test raises:
// ErrIdle while at the limit, ErrEndOfInput once count events are out. Its
// position commits with its steps. One instance.
type gatedSource struct {
	count, keys, batch int
	g                  *gate
}

// gate is how far a t_gated source may go; raise wakes it (runtime.Waker).
type gate struct {
	limit atomic.Int64
	wake  chan struct{}
}

var (
	gatesMu sync.Mutex
	gates   = map[string]*gate{}
	gateSeq int
)

// newGate registers a gate at limit 0 for the test's t_gated source and
// returns its name.
func newGate(t *testing.T) (string, *gate) {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	gateSeq++
	name := fmt.Sprintf("%s/%d", t.Name(), gateSeq)
	g := &gate{wake: make(chan struct{}, 1)}
	gates[name] = g
	t.Cleanup(func() {
		gatesMu.Lock()
		delete(gates, name)
		gatesMu.Unlock()
	})
	return name, g
}

func (g *gate) raise(n int) {
	g.limit.Store(int64(n))
	select {
	case g.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

func (s *gatedSource) Init(ic flowlet.InitContext) error {
	var err error
	if s.count, err = ic.Config.Int("count", 0); err != nil {
		return err
	}
	if s.keys, err = ic.Config.Int("keys", 1); err != nil {
		return err
	}
	if s.batch, err = ic.Config.Int("batch", 1); err != nil {
		return err
	}
	name, err := ic.Config.String("gate", "")
	if err != nil {
		return err
	}
	gatesMu.Lock()
	s.g = gates[name]
	gatesMu.Unlock()
	if s.g == nil {
		return fmt.Errorf("no gate %q", name)
	}
	return nil
}

func (s *gatedSource) Ready() <-chan struct{} { return s.g.wake }

func (s *gatedSource) Generate(ctx flowlet.Context) error {
	pos := ctx.State("pos")
	v, ok, err := pos.Get([]byte("n"))
	if err != nil {
		return err
	}
	n := 0
	if ok {
		n = int(binary.BigEndian.Uint64(v))
	}
	if n >= s.count {
		return flowlet.ErrEndOfInput
	}
	end := min(n+s.batch, s.count, int(s.g.limit.Load()))
	if end <= n {
		return flowlet.ErrIdle
	}
	for seq := n; seq < end; seq++ {
		k := strconv.Itoa(seq % s.keys)
		if err := ctx.Emit("out", fmt.Appendf(nil, "%s %d", k, seq), flowlet.Key("k", k)); err != nil {
			return err
		}
	}
	return pos.Put([]byte("n"), binary.BigEndian.AppendUint64(nil, uint64(end)))
}

func init() {
	flowlet.Register("t_gated", func() flowlet.Flowlet { return &gatedSource{} },
		flowlet.TypeInfo{Source: true, Outputs: []string{"out"}})
}

// TestScaleUnderLoad scales a hash-keyed consumer 1→3→2→1→3 (and its
// round-robin twin 1→2→1) while a source feeds them, then drains: every
// event counted exactly once per consumer, each key's sequence numbers seen
// in increasing order. The source lets the events out a part at a time (a
// gate the test raises) and ends only after the last scale: each scale
// happens while the source emits and the consumers have a backlog, and the
// app cannot drain (Scale: ErrNotRunning) before the test is done scaling.
func TestScaleUnderLoad(t *testing.T) {
	const total, keys = 12000, 23
	dir := t.TempDir()
	gateName, g := newGate(t)
	yaml := fmt.Sprintf(`
app: scale
flowlets:
  gen:
    type: t_gated
    config: {count: %d, batch: 40, keys: %d, gate: %q}
  cnt:
    type: t_seq
    batch_size: 30
  rr:
    type: t_seq
    batch_size: 30
connections:
  - {from: gen, to: cnt, strategy: hash, key: k}
  - {from: gen, to: rr, strategy: round_robin}
`, total, keys, gateName)
	a, err := runtime.Open(plan(t, dir, yaml), runtime.Options{DataDir: filepath.Join(dir, "data"), NoSync: true, Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()

	if _, err := a.Scale(ctx, "gen", 2); !errors.Is(err, runtime.ErrNotScalable) && !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("scaling a source: %v, want ErrNotScalable", err)
	}
	// Wait for Run to start the drivers.
	for ok := false; !ok; ok, _ = a.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := a.Scale(ctx, "gen", 2); !errors.Is(err, runtime.ErrNotScalable) {
		t.Errorf("scaling a source: %v, want ErrNotScalable", err)
	}
	if _, err := a.Scale(ctx, "cnt", 0); !errors.Is(err, runtime.ErrBadRequest) {
		t.Errorf("scaling to 0: %v, want ErrBadRequest", err)
	}
	if _, err := a.Scale(ctx, "nope", 2); !errors.Is(err, runtime.ErrUnknownFlowlet) {
		t.Errorf("scaling an unknown flowlet: %v", err)
	}
	steps := []struct {
		fl string
		n  int
	}{{"cnt", 3}, {"rr", 2}, {"cnt", 2}, {"rr", 1}, {"cnt", 1}, {"cnt", 3}}
	part := total / (len(steps) + 1)
	for i, s := range steps {
		// Let part events out and scale once half of them are: the source
		// is still emitting, the consumers have a backlog.
		g.raise((i + 1) * part)
		for flowletStatus(a.Status(), "gen").Processed < uint64(i*part+part/2) {
			if ctx.Err() != nil {
				t.Fatalf("the source did not emit up to %d: %+v", i*part+part/2, a.Status())
			}
			time.Sleep(time.Millisecond)
		}
		before := a.Status()
		old, err := a.Scale(ctx, s.fl, s.n)
		if err != nil {
			t.Fatalf("scale %s to %d: %v", s.fl, s.n, err)
		}
		if got := a.Instances(s.fl); got != s.n {
			t.Fatalf("%s has %d instances after scaling to %d", s.fl, got, s.n)
		}
		t.Logf("scaled %s %d→%d with gen at %d events", s.fl, old, s.n, flowletStatus(before, "gen").Processed)
	}
	g.raise(total) // the source ends: the app drains
	if err := <-runErr; err != nil {
		t.Fatalf("run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("not drained: %+v", a.Status())
	}
	st := a.Status()
	if f := flowletStatus(st, "cnt"); f.Instances != 3 || f.Backlog != 0 || f.Failed != 0 {
		t.Errorf("cnt status %+v", f)
	}
	for _, fl := range []string{"cnt", "rr"} {
		checkSeq(t, a, fl, total, keys)
	}
}

func flowletStatus(s runtime.Status, name string) runtime.FlowletStatus {
	for _, f := range s.Flowlets {
		if f.Name == name {
			return f
		}
	}
	return runtime.FlowletStatus{}
}

// checkSeq: every sequence number once, per-key counts exact, no order
// violation, the last per key the highest.
func checkSeq(t *testing.T, a *runtime.App, fl string, total, keys int) {
	t.Helper()
	err := a.View(fl, func(r runtime.StateReader) error {
		seen := 0
		it := r.Counters("seen").Scan(flowlet.ScanOptions{})
		for it.Next() {
			if it.Count() != 1 {
				t.Errorf("%s: seq %s counted %d times", fl, it.Key(), it.Count())
			}
			seen++
		}
		if err := it.Close(); err != nil {
			return err
		}
		if seen != total {
			t.Errorf("%s: %d distinct sequence numbers, want %d", fl, seen, total)
		}
		for k := range keys {
			key := []byte(strconv.Itoa(k))
			want := (total - k + keys - 1) / keys
			n, err := r.Counters("count").Get(key)
			if err != nil {
				return err
			}
			if n != int64(want) {
				t.Errorf("%s: key %d counted %d, want %d", fl, k, n, want)
			}
			bad, err := r.Counters("bad").Get(key)
			if err != nil {
				return err
			}
			if bad != 0 && fl == "cnt" {
				t.Errorf("%s: key %d saw %d out-of-order sequence numbers", fl, k, bad)
			}
			v, ok, err := r.Table("last").Get(key)
			if err != nil {
				return err
			}
			lastWant := uint64(k + (want-1)*keys)
			if !ok || binary.BigEndian.Uint64(v) != lastWant && fl == "cnt" {
				t.Errorf("%s: key %d last seq %v, want %d", fl, k, v, lastWant)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestScaleRefusedByInit: a single-instance sink (its TypeInfo says so)
// keeps its count when asked for two, and the app goes on and drains with
// the sink's output intact.
func TestScaleRefusedByInit(t *testing.T) {
	dir := t.TempDir()
	yaml := `
app: refuse
flowlets:
  gen: {type: generator, config: {count: 3000, rate: 3000, payload: "e{seq}"}}
  out: {type: file_sink, config: {path: out.txt}}
connections:
  - {from: gen, to: out}
`
	wd, _ := os.Getwd()
	os.Chdir(dir)
	defer os.Chdir(wd)
	a, err := runtime.Open(plan(t, dir, yaml), runtime.Options{DataDir: filepath.Join(dir, "data"), NoSync: true, Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	for ok := false; !ok; ok, _ = a.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := a.Scale(ctx, "out", 2); !errors.Is(err, runtime.ErrNotScalable) || !strings.Contains(err.Error(), "runs as a single instance") {
		t.Errorf("scaling a file_sink to 2: %v", err)
	}
	if n := a.Instances("out"); n != 1 {
		t.Errorf("out has %d instances", n)
	}
	if err := <-runErr; err != nil || ctx.Err() != nil {
		t.Fatalf("run: %v (ctx %v)", err, ctx.Err())
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 3000 {
		t.Errorf("sink wrote %d lines, want 3000", n)
	}
}
