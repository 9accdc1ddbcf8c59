package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestScaleWhileScaleDownPendingHonoursContext: while a scale-down whose
// context ended completes in the background (a removed instance's step is
// held), another Scale waited for it whatever its own context did: an HTTP
// scale request hung past its wait, until the step was done (up to
// --step-timeout). It now gives up when its context ends, with
// ErrScaleBusy, and changes nothing.
func TestScaleWhileScaleDownPendingHonoursContext(t *testing.T) {
	_, open := theBlock.Hold(t)
	dir := t.TempDir()
	a := runApp(t, plan(t, dir, `
app: sbusy
flowlets:
  gen: {type: generator, config: {rate: 200, batch: 5}}
  blk: {type: t_block, instances: 2, batch_size: 1}
connections:
  - {from: gen, to: blk}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	t.Cleanup(open) // before the run stops
	// The deadline only guards against a hang.
	for deadline := time.Now().Add(30 * time.Second); theBlock.Waiting() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 instances in a step", theBlock.Waiting())
		}
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Scale(ended, "blk", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("scale down with a step held and an ended context: %v, want context.Canceled", err)
	}

	// The scale-down is pending: a scale with an ended context returns.
	done := make(chan error, 1)
	go func() {
		_, err := a.Scale(ended, "blk", 2)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, runtime.ErrScaleBusy) || !errors.Is(err, context.Canceled) {
			t.Fatalf("scale while a scale-down is pending: %v, want ErrScaleBusy and context.Canceled", err)
		}
	case <-time.After(30 * time.Second): // a hang detector
		t.Fatal("a scale whose context ended waited for the pending scale-down")
	}
	if n := a.Instances("blk"); n != 2 {
		t.Fatalf("%d instances while the scale-down is pending, want 2 still", n)
	}

	open()
	// Once the steps are done the scale-down completes, and a scale goes
	// through.
	if _, err := a.Scale(context.Background(), "blk", 2); err != nil {
		t.Fatalf("scale up after the scale-down: %v", err)
	}
	if n := a.Instances("blk"); n != 2 {
		t.Fatalf("%d instances, want 2", n)
	}
}
