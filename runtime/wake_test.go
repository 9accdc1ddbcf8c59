package runtime_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestWakeups: consumers never poll their queues; they dequeue when the
// queue says something was committed (queue.Notifier). Once the generator
// has ended nothing else commits, so events ingested through App.Ingest and
// dead letters replayed into the running app are processed only if those
// writes wake the instances (input queue and replay queue respectively).
// The deadline only guards against a hang (a lost wake-up). With a second
// source cnt has three input queues (the waits take another path).
func TestWakeups(t *testing.T) {
	t.Run("one input", func(t *testing.T) {
		testWakeups(t, 20, `
app: wake
flowlets:
  gen: {type: generator, config: {count: 20, payload: "g{seq}"}}
  cnt: {type: t_count, instances: 2, retries: {max: 0}, config: {fail: bad}}
connections:
  - {from: gen, to: cnt}
`)
	})
	t.Run("two inputs", func(t *testing.T) {
		testWakeups(t, 25, `
app: wake
flowlets:
  gen: {type: generator, config: {count: 20, payload: "g{seq}"}}
  gen2: {type: generator, config: {count: 5, payload: "h{seq}"}}
  cnt: {type: t_count, instances: 2, retries: {max: 0}, config: {fail: bad}}
connections:
  - {from: gen, to: cnt}
  - {from: gen2, to: cnt}
`)
	})
}

func testWakeups(t *testing.T, generated uint64, yaml string) {
	dir := t.TempDir()
	p := plan(t, dir, yaml)
	a := runApp(t, p, runtime.Options{DataDir: filepath.Join(dir, "data")})
	cnt := func() runtime.FlowletStatus {
		for _, f := range a.Status().Flowlets {
			if f.Name == "cnt" {
				return f
			}
		}
		t.Fatal("no flowlet cnt in the status")
		return runtime.FlowletStatus{}
	}
	wait := func(what string, ok func(runtime.FlowletStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for !ok(cnt()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 60 s (a lost wake-up): %+v", what, cnt())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	wait("generated events processed", func(f runtime.FlowletStatus) bool { return f.Processed == generated })

	n, err := a.Ingest(context.Background(), "cnt", "gen.out", []runtime.IngestEvent{{Payload: []byte("i1")}, {Payload: []byte("bad1")}, {Payload: []byte("i2")}})
	if err != nil || n != 3 {
		t.Fatalf("ingest: %d, %v", n, err)
	}
	wait("ingested events processed", func(f runtime.FlowletStatus) bool { return f.Processed == generated+3 && f.DLQ == 1 })

	replayed, kept, err := a.Inspect().ReplayDeadLetters("cnt", map[string]string{"gen.out": ""})
	if err != nil || replayed != 1 || kept != 0 {
		t.Fatalf("replay: %d replayed, %d kept, %v", replayed, kept, err)
	}
	wait("replayed dead letter processed", func(f runtime.FlowletStatus) bool { return f.Processed == generated+4 && f.DeadLettered == 2 })

	for _, key := range []string{"i1", "i2", "g0", "g19"} {
		if got := counter(t, a, "cnt", "seen", key); got != 1 {
			t.Errorf("seen[%s] = %d, want 1", key, got)
		}
	}
	if got := counter(t, a, "cnt", "n", "total"); got != int64(generated)+2 {
		t.Errorf("total = %d, want %d (generated, 2 ingested; bad1 failed twice)", got, generated+2)
	}
}
