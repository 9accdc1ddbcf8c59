package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestScaleDownCancelledThenRetried: a scale-down whose context ends while
// a removed instance's step is in flight returns an error; the drivers
// still stop. A retry closed the stopped instances' stop channels again (a
// panic: close of a closed channel), and a scale back to the old count
// found nothing to do while the instances were stopped (their partitions
// never read again). The scale-down now completes once the steps in flight
// are done, and every event is processed exactly once.
func TestScaleDownCancelledThenRetried(t *testing.T) {
	dir := t.TempDir()
	a := runApp(t, plan(t, dir, `
app: scc
flowlets:
  gen: {type: generator, config: {count: 3000, rate: 3000, batch: 10, keys: {k: "{mod:16}"}}}
  blk: {type: t_block, instances: 2, batch_size: 5}
connections:
  - {from: gen, to: blk, strategy: hash, key: k, partitions: 4}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	entered, open := theBlock.Hold(t)
	<-entered // a step of blk waits in the gate; the other instance's will too

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Scale(ended, "blk", 1); !errors.Is(err, context.Canceled) {
		// Instance 1 might have had no step held: nothing to wait for.
		t.Logf("scale down with an ended context: %v", err)
	}
	open()
	// The retry, and a scale back up: no panic, and the counts hold.
	if _, err := a.Scale(context.Background(), "blk", 1); err != nil {
		t.Fatalf("retried scale down: %v", err)
	}
	if n := a.Instances("blk"); n != 1 {
		t.Fatalf("%d instances after the scale down, want 1", n)
	}
	if _, err := a.Scale(context.Background(), "blk", 2); err != nil {
		t.Fatalf("scale up: %v", err)
	}
	deadline := time.Now().Add(time.Minute) // a hang detector
	for counter(t, a, "blk", "n", "total") != 3000 {
		if time.Now().After(deadline) {
			t.Fatalf("processed %d of 3000: %+v", counter(t, a, "blk", "n", "total"), a.Status())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if f := flowletStatus(a.Status(), "blk"); f.Instances != 2 || f.Processed != 3000 {
		t.Errorf("blk: %+v", f)
	}
}
