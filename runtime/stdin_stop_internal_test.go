package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStdinSourceSilentStops: an app whose standard input never sends nor
// ends stops when asked, and closes: its stdin_source's reader, blocked
// in a read that cannot be interrupted, holds up neither (it ends with the
// process, or when the input does).
func TestStdinSourceSilentStops(t *testing.T) {
	defer openStdinPipe(t).Close()
	for _, drain := range []bool{false, true} {
		a := openYAML(t, `
app: silentstdin
flowlets:
  src: {type: stdin_source}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true, Drain: drain})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		for ok, _ := a.Ready(); !ok; ok, _ = a.Ready() {
			time.Sleep(time.Millisecond)
		}
		cancel()
		closed := make(chan error, 1)
		go func() {
			if err := <-done; err != nil {
				closed <- err
				return
			}
			closed <- a.Close()
		}()
		select { // a hang detector, not a timing assertion
		case err := <-closed:
			if err != nil {
				t.Errorf("drain=%v: %v", drain, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("drain=%v: Run or Close still waits a minute after the stop", drain)
		}
	}
}

// TestStdinSourceStopCommitsReadAhead: an app stopped (its run's context
// cancelled, as by SIGTERM) after its stdin_source's first step committed
// still commits every line the source took from standard input (read
// ahead of its steps, in its reader's buffer): standard input cannot give
// them again. They were dropped: only the lines of the steps before the
// stop counted. Stopped as the step commits, while the source is paused,
// and while back-pressure (max_backlog) holds it: its last steps wait for
// neither.
func TestStdinSourceStopCommitsReadAhead(t *testing.T) {
	for _, held := range []string{"none", "pause", "backlog"} {
		t.Run(held, func(t *testing.T) { testStdinStopCommits(t, held) })
	}
}

func testStdinStopCommits(t *testing.T, held string) {
	const lines, perStep = 100, 5
	w := openStdinPipe(t)
	defer w.Close() // open until the end: the source's next read blocks
	var input strings.Builder
	for i := range lines {
		fmt.Fprintf(&input, "l%d\n", i)
	}
	// Far less than a pipe's buffer, written before the app opens: the
	// source's first read takes every line at once.
	if _, err := w.WriteString(input.String()); err != nil {
		t.Fatal(err)
	}
	a := openYAML(t, fmt.Sprintf(`
app: stopstdin
flowlets:
  src: {type: stdin_source, config: {lines_per_step: %d, max_backlog: 1}}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, perStep), Options{NoSync: true})
	if held == "backlog" {
		if err := a.Pause("sink"); err != nil { // the backlog stays
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	firstCommit, committed := make(chan struct{}), false
	onSrcCommit(a, func(_ *stepCtx, evs []string) error {
		if len(evs) > 0 && !committed { // src's goroutine only
			committed = true
			close(firstCommit)
			if held == "none" {
				cancel() // the stop comes with the first step's commit
			}
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	hang := time.After(time.Minute) // a hang detector, not a timing assertion
	select {
	case <-firstCommit:
	case err := <-done:
		t.Fatalf("run ended before src committed: %v", err)
	case <-hang:
		t.Fatal("src did not commit in a minute")
	}
	switch held {
	case "pause":
		if err := a.Pause("src"); err != nil {
			t.Fatal(err)
		}
		if err := a.WaitPaused(ctx, "src"); err != nil {
			t.Fatal(err)
		}
	case "backlog":
		for a.byName["src"].throttled.Load() == 0 {
			select {
			case <-hang:
				t.Fatal("src not held by its backlog after a minute")
			case <-time.After(time.Millisecond):
			}
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-hang:
		t.Fatal("Run still runs a minute after the stop")
	}
	if err := a.View("src", func(r StateReader) error {
		v, ok, err := r.Table("position").Get([]byte("pos"))
		if err != nil || !ok || len(v) != 8 {
			return fmt.Errorf("src's position: %x, %v, %v", v, ok, err)
		}
		if n := binary.BigEndian.Uint64(v); n != lines {
			t.Errorf("%d lines committed after the stop, want the %d the source took", n, lines)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestStdinSourceStopStepFails: a step of the source's last ones (after
// the stop) that fails ends them at once, not retried (its backoff is an
// hour here) and Run still returns nil: the app is stopping.
func TestStdinSourceStopStepFails(t *testing.T) {
	pipeStdin(t, "a\nb\nc\nd\n")
	a := openYAML(t, `
app: stopfails
flowlets:
  src: {type: stdin_source, retries: {max: 5, backoff: 1h, max_backoff: 1h}, config: {lines_per_step: 1}}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := 0
	onSrcCommit(a, func(_ *stepCtx, evs []string) error {
		if ctx.Err() == nil {
			cancel() // the first step commits, with the stop
			return nil
		}
		failed++
		return errors.New("test: a last step fails")
	})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select { // a hang detector, not a timing assertion
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run still runs a minute after the stop: a failed last step retried?")
	}
	if failed != 1 {
		t.Errorf("%d last steps failed, want 1: the first ends them", failed)
	}
}
