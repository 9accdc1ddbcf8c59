package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/pluginhost"
	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
)

const poisonYAML = `
app: poison
flowlets:
  reader:
    type: file_source
    config: {path: %q}
  crasher:
    type: %s
    batch_size: 50
    retries: {max: 2, backoff: 1ms, max_backoff: 5ms}
  out:
    type: file_sink
    config: {path: %q}
connections:
  - {from: reader, to: crasher}
  - {from: crasher.out, to: out}
`

var poisonRuns atomic.Int64

// TestPipelinePoison runs a plugin in the runtime over lines of which one
// makes the plugin process exit and one makes it hang, every time: each
// attempt fails (a crash; the deadline), the host restarts the plugin, and
// after the retries both lines are in the dead-letter queue while every
// other line went through exactly once.
func TestPipelinePoison(t *testing.T) {
	p, err := pluginhost.Open(context.Background(), "crasher", "../../../internal/pluginhost/testdata/testplugin", ".",
		pluginhost.Options{CacheDir: filepath.Join(os.TempDir(), "flowrun-plugin-test-cache"),
			CallTimeout: 500 * time.Millisecond, RestartBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A fresh type name per run: the registry is global and -count=N reruns.
	typ := fmt.Sprintf("pluginhost_testplugin_%d", poisonRuns.Add(1))
	flowlet.Register(typ, p.New, p.Info())

	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.txt"), filepath.Join(dir, "out.txt")
	var lines, want []string
	for i := range 300 {
		l := fmt.Sprintf("line%03d", i)
		switch i {
		case 100:
			l = "exit"
		case 200:
			l = "hang"
		default:
			want = append(want, strings.ToUpper(l))
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(in, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Parse("app.yaml", fmt.Appendf(nil, poisonYAML, in, typ, out), planner.Options{Types: runtime.PlannerTypes()})
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	app, err := runtime.Open(plan, runtime.Options{DataDir: data, NoSync: true, Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := app.Run(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("run: %v (ctx %v)", err, ctx.Err())
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(b))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("sink has %d lines, want %d (every line but the two poisoned ones, once)", len(got), len(want))
	}
	st, err := runtime.OpenStore(data)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var dead []string
	err = st.DeadLetters("crasher", 0, func(d runtime.DeadLetter) bool {
		dead = append(dead, string(d.Payload))
		if !strings.Contains(d.Error, "plugin ProcessBatch failed") {
			t.Errorf("dead letter %q: reason %q", d.Payload, d.Error)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dead)
	if !slices.Equal(dead, []string{"exit", "hang"}) {
		t.Errorf("dead letters %q, want exit and hang", dead)
	}
}
