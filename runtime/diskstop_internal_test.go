package runtime

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestDiskStopWritesOnlyWhatItMust: a run stopping on a nearly full disk
// (under the reserve) runs a stdin_source's last steps, which commit the
// lines it read ahead (lost otherwise), only while stopDrainFree is free,
// and no sink publishes (what it would write stays in the store, and the
// next start publishes it first). Both ran whatever the free space: the
// stop wrote the read-ahead and the publishes into the last blocks of the
// disk, where Badger's memory-mapped writes crash the process. The room
// is checked before each last step: a step that leaves less (filled) is
// the last one.
func TestDiskStopWritesOnlyWhatItMust(t *testing.T) {
	for _, tc := range []struct {
		name  string
		free  int64 // at the stop, under the 128 MiB reserve
		fill  bool  // the first commit after the stop leaves 1 MiB free
		lines uint64
	}{
		{"room", 100 << 20, false, 100},    // every line the source read commits
		{"nearly_full", 1 << 20, false, 5}, // only those committed before the stop
		{"filled", 100 << 20, true, 10},    // and those of the first last step
	} {
		t.Run(tc.name, func(t *testing.T) {
			var free atomic.Int64
			free.Store(10 << 30)
			old := freeBytes
			freeBytes = func(string) (int64, int64, error) { return free.Load(), 100 << 30, nil }
			defer func() { freeBytes = old }()

			stdinLinesOpen(t, 100)
			a := openYAML(t, `
app: diskstop
flowlets:
  src: {type: stdin_source, config: {lines_per_step: 5}}
  sink: {type: t_publisher}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The sink takes nothing (its publish at the start aside), and
			// the source is paused at its first commit, holding the rest of
			// its read-ahead: nothing commits but the stop's writes.
			if err := a.Pause("sink"); err != nil {
				t.Fatal(err)
			}
			var stopping atomic.Bool
			var afterStop atomic.Int64 // commits once the disk is nearly full
			firstCommit := make(chan struct{})
			a.commitFault = func(sc *stepCtx) error {
				switch {
				case stopping.Load():
					if afterStop.Add(1) == 1 && tc.fill {
						free.Store(1 << 20)
					}
				case sc.in.fl.Name == "src" && len(sc.emits) > 0: // once: it is paused
					if err := a.Pause("src"); err != nil {
						t.Error(err)
					}
					close(firstCommit)
				}
				return nil
			}
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			<-firstCommit
			for _, f := range []string{"src", "sink"} {
				if err := a.WaitPaused(ctx, f); err != nil {
					t.Fatal(err)
				}
			}
			stopping.Store(true)
			free.Store(tc.free)
			select { // a hang detector, not a timing assertion
			case err := <-done:
				if !errors.Is(err, ErrDiskSpace) {
					t.Fatalf("run: %v, want ErrDiskSpace", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("the run did not stop under the reserve")
			}
			if n := srcLinesTaken(t, a); n != tc.lines {
				t.Errorf("%d lines taken after the stop with %d MiB free, want %d", n, tc.free>>20, tc.lines)
			}
			// room: src's last steps (100 lines, 5 a step); never a publish.
			if want := map[string]int64{"room": 19, "nearly_full": 0, "filled": 1}[tc.name]; afterStop.Load() != want {
				t.Errorf("%d commits after the stop, want %d", afterStop.Load(), want)
			}
		})
	}
}
