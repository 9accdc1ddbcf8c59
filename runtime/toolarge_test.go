package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// t_heavy: for each event "e<seq>", counter n/total +1, then by seq
// (config): huge → 20,000 state writes (too large for one atomic write on
// its own); wide (seq in [wide_from, wide_to)) → 1,000 state writes (fits
// alone, not ten together); fat → 20 emits of 1 MiB (large, but event
// payloads go to Badger's value log: fits); every other event is emitted
// once as it is.
type heavyFlowlet struct{ huge, fat, wideFrom, wideTo int }

func (h *heavyFlowlet) Init(ic flowlet.InitContext) error {
	c := ic.Config
	h.huge, _ = c.Int("huge", -1)
	h.fat, _ = c.Int("fat", -1)
	h.wideFrom, _ = c.Int("wide_from", -1)
	h.wideTo, _ = c.Int("wide_to", -1)
	return nil
}

func (h *heavyFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	seq, err := strconv.Atoi(strings.TrimPrefix(string(ev.Payload), "e"))
	if err != nil {
		return flowlet.Permanent(err)
	}
	if err := ctx.Counters("n").Add([]byte("total"), 1); err != nil {
		return err
	}
	puts := func(n int) error {
		val := make([]byte, 100)
		for i := range n {
			if err := ctx.State("wide").Put(fmt.Appendf(nil, "%s-%d", ev.Payload, i), val); err != nil {
				return err
			}
		}
		return nil
	}
	switch {
	case seq == h.huge:
		return puts(20000)
	case seq >= h.wideFrom && seq < h.wideTo:
		return puts(1000)
	case seq == h.fat:
		big := make([]byte, runtime.MaxPayload)
		for range 20 {
			if err := ctx.Emit("out", big); err != nil {
				return err
			}
		}
		return nil
	}
	return ctx.Emit("out", ev.Payload)
}

// t_tally counts events and payload bytes: counters n/events, n/bytes.
type tallyFlowlet struct{}

func (tallyFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	if err := ctx.Counters("n").Add([]byte("events"), 1); err != nil {
		return err
	}
	return ctx.Counters("n").Add([]byte("bytes"), int64(len(ev.Payload)))
}

func init() {
	flowlet.Register("t_heavy", func() flowlet.Flowlet { return &heavyFlowlet{} }, flowlet.TypeInfo{Outputs: []string{"out"}})
	flowlet.Register("t_tally", func() flowlet.Flowlet { return tallyFlowlet{} }, flowlet.TypeInfo{Sink: true})
}

// tooLargeLog keeps the StepTooLargeErrors the runtime logs.
type tooLargeLog struct {
	mu   sync.Mutex
	errs []*runtime.StepTooLargeError
}

func (l *tooLargeLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *tooLargeLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *tooLargeLog) WithGroup(string) slog.Handler            { return l }
func (l *tooLargeLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			var tl *runtime.StepTooLargeError
			if errors.As(err, &tl) {
				l.mu.Lock()
				l.errs = append(l.errs, tl)
				l.mu.Unlock()
			}
		}
		return true
	})
	return nil
}

// TestStepTooLarge: steps whose writes do not fit in one atomic write of
// the store. The generator commits its 40 events in one step, so the heavy
// flowlet's first step holds all of them: too large (ten wide events
// together, and the huge one), it is redone with fewer events until the
// steps fit; the huge event, too large on its own, is dead-lettered after
// one attempt. Every other event, the wide ones included, is processed
// exactly once and nothing else reaches the DLQ; the fat event's 20 MiB of
// emits commit (event payloads go to the value log).
func TestStepTooLarge(t *testing.T) {
	for _, tc := range []struct {
		name string
		huge int // -1: none
	}{{"split only", -1}, {"split and one huge event", 7}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logs := &tooLargeLog{}
			a := runDrain(t, dir, fmt.Sprintf(`
app: big
flowlets:
  gen: {type: generator, config: {count: 40, payload: "e{seq}", batch: 40}}
  heavy: {type: t_heavy, retries: {max: 3, backoff: 1ms}, config: {huge: %d, fat: 13, wide_from: 20, wide_to: 30}}
  sink: {type: t_tally}
connections:
  - {from: gen, to: heavy}
  - {from: heavy, to: sink}
`, tc.huge), runtime.Options{Logger: slog.New(logs)})
			defer a.Close()

			ok := 40 // events processed to the end
			if tc.huge >= 0 {
				ok--
			}
			want := map[string]int64{"events": int64(ok - 1 + 20), "bytes": 20 * runtime.MaxPayload}
			for i := range 40 {
				if i != 13 && i != tc.huge && (i < 20 || i >= 30) {
					want["bytes"] += int64(len(fmt.Sprint("e", i)))
				}
			}
			want["events"] -= 10 // the wide events emit nothing
			for k, v := range want {
				if got := counter(t, a, "sink", "n", k); got != v {
					t.Errorf("sink n/%s = %d, want %d", k, got, v)
				}
			}
			if got := counter(t, a, "heavy", "n", "total"); got != int64(ok) {
				t.Errorf("heavy n/total = %d, want %d (each committed event once)", got, ok)
			}
			wide := 0
			err := a.View("heavy", func(r runtime.StateReader) error {
				it := r.Table("wide").Scan(flowletScanAll)
				defer it.Close()
				for it.Next() {
					if !strings.HasPrefix(string(it.Key()), "e2") {
						t.Errorf("unexpected state key %q", it.Key())
					}
					wide++
				}
				return it.Err()
			})
			if err != nil || wide != 10*1000 {
				t.Errorf("heavy's table wide: %d keys (%v), want 10000", wide, err)
			}
			st := flowletStatus(a.Status(), "heavy")
			if st.Processed != 40 || st.TooLarge == 0 {
				t.Errorf("heavy: processed %d (want 40), too_large %d (want > 0)", st.Processed, st.TooLarge)
			}
			a.Close()

			dl := deadLetters(t, filepath.Join(dir, "data"), "heavy")
			logs.mu.Lock()
			defer logs.mu.Unlock()
			if len(logs.errs) == 0 || logs.errs[0].Flowlet != "heavy" || logs.errs[0].Events < 2 {
				t.Fatalf("logged too-large steps: %+v; want the first of several events of flowlet heavy", logs.errs)
			}
			if tc.huge < 0 {
				if len(dl) != 0 || st.Failed != 0 {
					t.Errorf("%d dead letters, %d failures: too large batches must be split, not fail their events", len(dl), st.Failed)
				}
				return
			}
			if len(dl) != 1 || dl[0].EventID == "" || dl[0].Attempts != 1 || st.Failed != 1 {
				t.Fatalf("dead letters %+v, failures %d: want the huge event, after one attempt", dl, st.Failed)
			}
			if string(dl[0].Payload) != "e7" || !strings.Contains(dl[0].Error, `flowlet "heavy"`) || !strings.Contains(dl[0].Error, "too large") {
				t.Errorf("dead letter: %q %q", dl[0].Payload, dl[0].Error)
			}
			last := logs.errs[len(logs.errs)-1]
			if last.Events != 1 || last.StateWrites != 20001 || last.StateBytes < 20000*100 || last.LimitBytes <= 0 || last.LimitBytes >= last.StateBytes {
				t.Errorf("last too-large step: %+v; want the huge event's 20,001 writes over the limit", last)
			}
		})
	}
}
