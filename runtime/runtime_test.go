package runtime_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime"
)

const pipeline = `
app: t
flowlets:
  gen:
    type: generator
    instances: 2
    config: {count: 5000, payload: "e{seq}", keys: {k: "{mod:37}"}}
  mid:
    type: t_count
    instances: 3
    config: {emit: true, key: p}
  cnt:
    type: t_count
    instances: 2
connections:
  - {from: gen, to: mid, strategy: hash, key: k}
  - {from: mid, to: cnt, strategy: hash, key: p}
`

func TestPipelineExactCounts(t *testing.T) {
	dir := t.TempDir()
	a := runDrain(t, dir, pipeline, runtime.Options{NoSync: true})
	defer a.Close()
	if !a.FastPath() {
		t.Fatal("not every participant is on the single-store fast path")
	}
	for _, f := range []string{"mid", "cnt"} {
		if n := counter(t, a, f, "n", "total"); n != 5000 {
			t.Errorf("%s total = %d, want 5000", f, n)
		}
	}
	for _, s := range []string{"e0", "e4999", "e2500"} {
		if n := counter(t, a, "cnt", "seen", s); n != 1 {
			t.Errorf("cnt seen %s = %d", s, n)
		}
	}
	st := a.TxStats()
	if st.Invalidated != 0 || st.Committed == 0 {
		t.Errorf("tx stats after a clean run: %+v", st)
	}
	s := a.Status()
	if !s.Drained {
		t.Error("status not drained")
	}
	for _, f := range s.Flowlets {
		if f.Backlog != 0 || f.DLQ != 0 || f.Failed != 0 {
			t.Errorf("flowlet status %+v", f)
		}
	}
}

func TestErrorRetriesThenDLQ(t *testing.T) {
	resetFlaky()
	dir := t.TempDir()
	yaml := `
app: t
flowlets:
  gen: {type: generator, config: {count: 300, payload: "e{seq}."}}
  cnt:
    type: t_count
    batch_size: 50
    retries: {max: 2, backoff: 1ms, max_backoff: 4ms}
    config: {fail: "e17.", panic: "e123.", flaky: "e5.", flaky_times: 2}
connections:
  - {from: gen, to: cnt}
`
	a := runDrain(t, dir, yaml, runtime.Options{NoSync: true})
	// e17 and e123 fail every time; e5 fails twice and then succeeds (max 2
	// retries = 3 attempts).
	total := counter(t, a, "cnt", "n", "total")
	if total != 298 {
		t.Errorf("total = %d, want 298 (300 minus two dead letters)", total)
	}
	for _, s := range []string{"e17.", "e123."} {
		if n := counter(t, a, "cnt", "seen", s); n != 0 {
			t.Errorf("failed event %s counted %d times", s, n)
		}
	}
	if n := counter(t, a, "cnt", "seen", "e5."); n != 1 {
		t.Errorf("flaky e5 counted %d times, want 1", n)
	}
	st := a.Status()
	a.Close()
	dl := deadLetters(t, filepath.Join(dir, "data"), "cnt")
	if len(dl) != 2 {
		t.Fatalf("dead letters: %+v", dl)
	}
	got := map[string]runtime.DeadLetter{}
	for _, d := range dl {
		got[string(d.Payload)] = d
	}
	if d := got["e17."]; d.Attempts != 3 || !strings.Contains(d.Error, `refusing "e17."`) || d.Input != "gen.out" {
		t.Errorf("e17 dead letter: %+v", d)
	}
	if d := got["e123."]; !strings.Contains(d.Error, "panic") {
		t.Errorf("e123 dead letter: %+v", d)
	}
	var cnt runtime.FlowletStatus
	for _, f := range st.Flowlets {
		if f.Name == "cnt" {
			cnt = f
		}
	}
	if cnt.DLQ != 2 || cnt.DeadLettered != 2 || cnt.Failed < 8 {
		t.Errorf("status: %+v", cnt)
	}
}
