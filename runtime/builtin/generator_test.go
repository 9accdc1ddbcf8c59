package builtin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
	"github.com/flowrun/flowrun/planner"
)

// A rate-limited generator that fell behind (paused for 10 s) sends at most
// a second's worth at once, then keeps its rate; a user saw 10 s worth of a
// rate: 100 generator come out in half a second after a resume.
func TestGeneratorRateAfterPause(t *testing.T) {
	ctx := flowlettest.New("gen")
	g := &Generator{}
	if err := ctx.Init(g, map[string]any{"rate": 100, "batch": 10}); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	g.clock = func() time.Time { return now }
	// drain runs steps at the current (fake) time until one emits nothing,
	// and returns how many events went out.
	drain := func() int {
		t.Helper()
		total := 0
		for {
			before := len(ctx.Emitted())
			if err := ctx.Generate(g); err != nil {
				t.Fatal(err)
			}
			n := len(ctx.Emitted()) - before
			if n == 0 {
				return total
			}
			total += n
		}
	}
	if n := drain(); n != 1 {
		t.Fatalf("at the start: %d events, want 1", n)
	}
	now = now.Add(time.Second)
	if n := drain(); n < 95 || n > 105 {
		t.Fatalf("after 1 s at rate 100: %d events", n)
	}
	now = now.Add(10 * time.Second) // paused
	if n := drain(); n > 100 {
		t.Fatalf("after a 10 s pause: %d events at once, want at most a second's worth (100)", n)
	}
	total := 0
	for range 20 { // 2 s of steps every 100 ms
		now = now.Add(100 * time.Millisecond)
		total += drain()
	}
	if total < 190 || total > 210 {
		t.Fatalf("2 s after the burst: %d events, want the rate (200)", total)
	}
}

// "{{" and "}}" are literal braces, so a payload can be JSON.
func TestGeneratorTemplateBraces(t *testing.T) {
	tp, err := parseTemplate(`{{"n": {seq}, "m": {mod:3}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tp.expand(nil, 7, 0)); got != `{"n": 7, "m": 1}` {
		t.Errorf("expanded %q", got)
	}
	if _, err := parseTemplate(`{"n": {seq}}`); err == nil {
		t.Error(`a lone "{" before a non-placeholder must still be an error`)
	}
}

// A rate so small (below about 1e-10 events/s) that the wait for the next
// event overflowed time.Duration: the wait came out negative and the
// source went on at once, step after step without waiting (a spin). Its
// steps wait at most 100 ms, as at any rate behind its schedule.
func TestGeneratorTinyRateWaits(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		insts int
	}{{1e-11, 1}, {1e-300, 1}, {1e-9, 64}, {5e-324, 1}} {
		ctx := flowlettest.New("gen").WithInstance(0, tc.insts)
		g := &Generator{}
		if err := ctx.Init(g, map[string]any{"rate": tc.rate}); err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_000_000, 0)
		g.clock = func() time.Time { return now }
		var waits []time.Duration
		g.after = func(d time.Duration) <-chan time.Time {
			waits = append(waits, d)
			c := make(chan time.Time, 1)
			c <- now
			return c
		}
		for range 3 {
			if err := ctx.Generate(g); err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Hour)
		}
		if n := len(ctx.Emitted()); n != 1 {
			t.Errorf("rate %g, %d instances: %d events in 3 h, want 1 (the first)", tc.rate, tc.insts, n)
		}
		if len(waits) != 2 {
			t.Fatalf("rate %g, %d instances: %d waits, want 2", tc.rate, tc.insts, len(waits))
		}
		for _, w := range waits {
			if w != 100*time.Millisecond {
				t.Errorf("rate %g, %d instances: waited %v, want 100ms", tc.rate, tc.insts, w)
			}
		}
	}
}

// A huge batch (1e12) with no count built one step of that many events in
// memory. batch is bounded as a flowlet's batch_size is (most events in
// one step): the config check refuses more, naming the bound.
func TestGeneratorBatchBound(t *testing.T) {
	for _, tc := range []struct {
		batch int
		ok    bool
	}{{1, true}, {planner.MaxBatchSize, true}, {planner.MaxBatchSize + 1, false}, {1_000_000_000_000, false}, {0, false}} {
		err := (&Generator{}).CheckConfig(flowlet.InitContext{Name: "gen", Config: flowlet.NewConfig("gen", map[string]any{"batch": tc.batch}), Instances: 1})
		if tc.ok {
			if err != nil {
				t.Errorf("batch %d: %v", tc.batch, err)
			}
			continue
		}
		var ce *flowlet.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("batch %d: got %v, want a ConfigError", tc.batch, err)
			continue
		}
		if ce.Field != "batch" || !strings.Contains(ce.Msg, "100000") {
			t.Errorf("batch %d: field %q, %q: want the field batch and its bound 100000", tc.batch, ce.Field, ce.Msg)
		}
	}
}

// A rate so high that a second's worth of events overflows an int64 made
// the schedule's arithmetic wrap: the generator spun, emitting nothing. A
// rate over MaxGeneratorRate is refused at the field.
func TestGeneratorRateBound(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		ok   bool
	}{{0, true}, {1e-12, true}, {MaxGeneratorRate, true}, {MaxGeneratorRate * 2, false}, {1e19, false}, {1e300, false}} {
		err := (&Generator{}).CheckConfig(flowlet.InitContext{Name: "gen", Config: flowlet.NewConfig("gen", map[string]any{"rate": tc.rate}), Instances: 1})
		if tc.ok {
			if err != nil {
				t.Errorf("rate %g: %v", tc.rate, err)
			}
			continue
		}
		var ce *flowlet.ConfigError
		if !errors.As(err, &ce) || ce.Field != "rate" || !strings.Contains(ce.Msg, "1e+09") {
			t.Errorf("rate %g: got %v, want a ConfigError at the field rate naming its bound 1e+09", tc.rate, err)
		}
	}
}
