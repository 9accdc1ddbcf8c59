package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// Under the disk reserve an app does not start, and a running app stops
// cleanly (instead of Badger's memory-mapped writes faulting the process on a
// full disk); with space again it resumes exactly.
func TestDiskReserve(t *testing.T) {
	var free atomic.Int64
	free.Store(1 << 20)
	var size atomic.Int64
	size.Store(100 << 30)
	defer runtime.SetFreeBytes(func(string) (int64, int64, error) { return free.Load(), size.Load(), nil })()
	dir := t.TempDir()
	app := `app: disk
flowlets:
  gen: {type: generator, config: {count: 20000, rate: 4000}}
  c: {type: t_count}
connections:
  - {from: gen, to: c}
`
	opts := runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")}
	_, err := runtime.Open(plan(t, dir, app), opts)
	if !errors.Is(err, runtime.ErrDiskSpace) || !strings.Contains(err.Error(), "has 1 MiB free, under the 128 MiB") {
		t.Fatalf("open with 1 MiB free: %v", err)
	}

	free.Store(10 << 30)
	a, err := runtime.Open(plan(t, dir, app), opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	deadline := time.Now().Add(30 * time.Second)
	for counter(t, a, "c", "n", "total") < 2000 {
		if time.Now().After(deadline) {
			t.Fatal("no progress")
		}
		time.Sleep(10 * time.Millisecond)
	}
	free.Store(1 << 20)
	select {
	case err := <-done:
		if !errors.Is(err, runtime.ErrDiskSpace) {
			t.Fatalf("run under the reserve ended with %v, want ErrDiskSpace", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not stop under the reserve")
	}
	stopped := counter(t, a, "c", "n", "total")
	a.Close()
	if stopped >= 20000 {
		t.Fatalf("the run consumed everything (%d) before the reserve stopped it: the test shows nothing", stopped)
	}

	free.Store(10 << 30)
	a = runDrain(t, dir, app, opts)
	defer a.Close()
	if n := counter(t, a, "c", "n", "total"); n != 20000 {
		t.Fatalf("after the stop and a restart: %d events counted, want exactly 20000", n)
	}
	// A negative reserve turns the check off.
	free.Store(0)
	opts.MinFreeDisk = -1
	a.Close()
	b, err := runtime.Open(plan(t, dir, app), opts)
	if err != nil {
		t.Fatalf("MinFreeDisk -1 with nothing free: %v", err)
	}
	b.Close()

	// A small file system gets a twentieth of itself (at least 16 MiB).
	opts.MinFreeDisk = 0
	size.Store(400 << 20)
	free.Store(19 << 20)
	if _, err := runtime.Open(plan(t, dir, app), opts); !errors.Is(err, runtime.ErrDiskSpace) || !strings.Contains(err.Error(), "under the 20 MiB") {
		t.Fatalf("19 MiB free of 400 MiB: %v, want a refusal under a 20 MiB reserve", err)
	}
	free.Store(21 << 20)
	if b, err = runtime.Open(plan(t, dir, app), opts); err != nil {
		t.Fatalf("21 MiB free of 400 MiB: %v", err)
	}
	b.Close()
	size.Store(100 << 20)
	free.Store(15 << 20)
	if _, err := runtime.Open(plan(t, dir, app), opts); !errors.Is(err, runtime.ErrDiskSpace) || !strings.Contains(err.Error(), "under the 16 MiB") {
		t.Fatalf("15 MiB free of 100 MiB: %v, want a refusal under the 16 MiB floor", err)
	}
}
