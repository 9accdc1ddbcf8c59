package runtime_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime"
)

// On the durable store with DeferCommits, steps commit deferred (visible
// before their sync):
// the counts stay exact, the coordinator reports deferred commits, and the
// file sink — which publishes outside the store, so commits durably — has
// every event once.
func TestDurablePipelineDefersCommits(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	yaml := pipeline + `  - {from: mid, to: sink}
` // connections end the pipeline app: add the sink's, then the sink
	yaml = strings.Replace(yaml, "connections:", `  sink: {type: file_sink, config: {path: `+out+`, fsync: false}}
connections:`, 1)
	a := runDrain(t, dir, yaml, runtime.Options{DeferCommits: true})
	defer a.Close()
	for _, f := range []string{"mid", "cnt"} {
		if n := counter(t, a, f, "n", "total"); n != 5000 {
			t.Errorf("%s total = %d, want 5000", f, n)
		}
	}
	st := a.TxStats()
	if st.Deferred == 0 || st.Deferred >= st.Committed {
		t.Errorf("durable run: %d of %d commits deferred, want some but not all (sink, setup)", st.Deferred, st.Committed)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	if len(lines) != 5000 || len(seen) != 5000 {
		t.Errorf("sink wrote %d lines, %d distinct; want 5000 once each", len(lines), len(seen))
	}
}

// By default every step is durable before the next one sees it.
func TestDurablePipelineStrictByDefault(t *testing.T) {
	dir := t.TempDir()
	a := runDrain(t, dir, pipeline, runtime.Options{})
	defer a.Close()
	if n := counter(t, a, "cnt", "n", "total"); n != 5000 {
		t.Errorf("cnt total = %d, want 5000", n)
	}
	if st := a.TxStats(); st.Deferred != 0 {
		t.Errorf("%d commits deferred without DeferCommits", st.Deferred)
	}
}
