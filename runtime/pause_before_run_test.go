package runtime_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestPauseBeforeRunIsNotParked: a flowlet paused before the app runs is
// parked only once no step of it can run until Resume. A sink that
// publishes (the file sink) runs a Publish step when the app starts, paused
// or not (what an earlier run committed goes out first), so WaitPaused and
// Status answered parked at once before Run, and the sink then ran a step:
// "paused" did not mean no step until resume. They now count such an
// instance busy from Open: parked once Run started it, it published and it
// parked. A flowlet without Publish runs no step before it looks at the
// pause, and is parked at once.
func TestPauseBeforeRunIsNotParked(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	a, err := runtime.Open(plan(t, dir, `
app: pbr
flowlets:
  gen: {type: generator, config: {count: 5}}
  c: {type: t_count, config: {emit: true}}
  sink: {type: file_sink, config: {path: `+out+`, fsync: false}}
connections:
  - {from: gen, to: c}
  - {from: c.out, to: sink}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, fl := range []string{"c", "sink"} {
		if err := a.Pause(fl); err != nil {
			t.Fatal(err)
		}
	}
	// A context that ended: WaitPaused answers where the flowlet stands.
	ended, cancelEnded := context.WithCancel(context.Background())
	cancelEnded()
	if err := a.WaitPaused(ended, "c"); err != nil {
		t.Errorf("WaitPaused of a paused processor before Run: %v, want parked (it runs no step before it sees the pause)", err)
	}
	if err := a.WaitPaused(ended, "sink"); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitPaused of a paused file sink before Run: %v, want not parked (its Publish runs when the app starts)", err)
	}
	if f := flowletStatus(a.Status(), "sink"); !f.Paused || f.Parked {
		t.Errorf("paused file sink before Run: %+v, want paused, not parked", f)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	if err := a.WaitPaused(context.Background(), "sink"); err != nil {
		t.Fatalf("WaitPaused of the sink once running: %v", err)
	}
	// The sink's first Publish on the store records the output's size.
	var published bool
	if err := a.View("sink", func(r runtime.StateReader) error {
		var err error
		_, published, err = r.Table("sink").Get([]byte("flushed"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !published {
		t.Errorf("parked before its first Publish committed")
	}
	if err := a.WaitPaused(context.Background(), "c"); err != nil {
		t.Fatal(err)
	}
	if n := counter(t, a, "c", "n", "total"); n != 0 {
		t.Errorf("paused processor processed %d events", n)
	}
	// Resumed, everything flows.
	for _, fl := range []string{"c", "sink"} {
		if err := a.Resume(fl); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute) // a hang detector
	for {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(string(b), "\n") == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("output %q after resume, want 5 lines", b)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
