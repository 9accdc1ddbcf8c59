package runtime

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/tx"
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
	stdinLinesOpen(t, lines)
	a := openStdinApp(t, fmt.Sprintf("config: {lines_per_step: %d, max_backlog: 1}", perStep))
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
	if n := srcLinesTaken(t, a); n != lines {
		t.Errorf("%d lines committed after the stop, want the %d the source took", n, lines)
	}
}

// stdinLinesOpen makes standard input, for the test, a pipe holding the
// lines l0 … ln-1 and left open until the test ends (the source's read
// after them blocks). Far less than a pipe's buffer, written before the
// app opens: the source's first read takes every line at once.
func stdinLinesOpen(t *testing.T, n int) {
	t.Helper()
	w := openStdinPipe(t)
	t.Cleanup(func() { w.Close() })
	var input strings.Builder
	for i := range n {
		fmt.Fprintf(&input, "l%d\n", i)
	}
	if _, err := w.WriteString(input.String()); err != nil {
		t.Fatal(err)
	}
}

// srcLinesTaken is the count of lines src (a stdin_source) committed.
func srcLinesTaken(t *testing.T, a *App) uint64 {
	t.Helper()
	var n uint64
	if err := a.View("src", func(r StateReader) error {
		v, ok, err := r.Table("position").Get([]byte("pos"))
		if err != nil || !ok || len(v) != 8 {
			return fmt.Errorf("src's position: %x, %v, %v", v, ok, err)
		}
		n = binary.BigEndian.Uint64(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStdinSourceStopStepFails: a step of the source's last ones (after
// the stop) that fails ends them at once, not retried (its backoff is an
// hour here) and Run still returns nil: the app is stopping.
func TestStdinSourceStopStepFails(t *testing.T) {
	pipeStdin(t, "a\nb\nc\nd\n")
	a := openStdinApp(t, "retries: {max: 5, backoff: 1h, max_backoff: 1h}, config: {lines_per_step: 1}")
	failed := 0
	runStoppedAtFirstCommit(t, a, func([]string) error {
		failed++
		return errors.New("test: a last step fails")
	})
	if failed != 1 {
		t.Errorf("%d last steps failed, want 1: the first ends them", failed)
	}
}

// TestStdinSourceStopSlowLineDeadLettered: a line whose step is too slow
// alone (past step_timeout) among the last steps after the stop goes to
// the source's dead-letter queue, as it does after its retries while the
// app runs, and the lines after it commit: the last steps retry nothing,
// and ending them there lost the line and every line after it.
func TestStdinSourceStopSlowLineDeadLettered(t *testing.T) {
	const lines, slow = 100, "l20"
	stdinLinesOpen(t, lines)
	a := openStdinApp(t, "retries: {max: 2, backoff: 1h, max_backoff: 1h}, config: {lines_per_step: 5}")
	runStoppedAtFirstCommit(t, a, func(evs []string) error {
		if slices.Contains(evs, slow) {
			return fmt.Errorf("%w (test: %s is slow)", tx.ErrNotInProgress, slow)
		}
		return nil
	})
	if n := srcLinesTaken(t, a); n != lines {
		t.Errorf("%d lines taken after the stop, want the %d the source read (%s dead-lettered)", n, lines, slow)
	}
	if dead := srcDeadLetters(t, a); len(dead) != 1 || string(dead[0].Payload) != slow {
		t.Errorf("dead letters of src: %+v, want %s's", dead, slow)
	}
}

// runStoppedAtFirstCommit runs a, an app whose stdin_source is src, and
// stops it as src's first step commits; src's commits after the stop
// fail with what afterStop returns for their lines. Run must return nil.
func runStoppedAtFirstCommit(t *testing.T, a *App, afterStop func(evs []string) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	onSrcCommit(a, func(_ *stepCtx, evs []string) error {
		if ctx.Err() == nil { // src's goroutine only
			cancel() // the first step commits, with the stop
			return nil
		}
		return afterStop(evs)
	})
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitRunNil(t, done)
}

// waitRunNil waits for Run's error on done, which must be nil.
func waitRunNil(t *testing.T, done <-chan error) {
	t.Helper()
	select { // a hang detector, not a timing assertion
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run still runs a minute after the stop: a failed last step retried?")
	}
}

// openStdinApp opens an app whose stdin_source src, with the rest of its
// spec srcSpec, feeds sink (t_take).
func openStdinApp(t *testing.T, srcSpec string) *App {
	t.Helper()
	return openYAML(t, fmt.Sprintf(`
app: stopstdin
flowlets:
  src: {type: stdin_source, %s}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, srcSpec), Options{NoSync: true})
}

// TestStopDrainerTimedOutStepFails: a last step (after the stop) that runs
// out of its step_timeout and fails is a failure, counted and logged, not
// the app's stop: its context is the step's own, not Run's. It passed for
// the stop itself (an idle step): the source was taken for holding nothing
// more, and what it held was lost without a word.
func TestStopDrainerTimedOutStepFails(t *testing.T) {
	a := openYAML(t, `
app: drainslow
flowlets:
  src: {type: t_drainslow}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true, StepTimeout: 50 * time.Millisecond})
	src := a.byName["src"].insts[0].f.(*drainSlow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-src.generating
	cancel()
	waitRunNil(t, done)
	for _, st := range a.Status().Flowlets {
		if st.Name == "src" && (st.Failed != 1 || !strings.Contains(st.LastError, errDrainSlow.Error())) {
			t.Errorf("src: %d failed, last error %q; want its last step's failure", st.Failed, st.LastError)
		}
	}
}

var errDrainSlow = errors.New("test: a last step ran out of time")

// drainSlow (t_drainslow) is a StopDrainer that holds a record at the
// stop: its last step waits for the step's context to end, then fails.
type drainSlow struct {
	generating chan struct{} // closed at its first step
	once       sync.Once
	stopped    atomic.Bool
}

func (d *drainSlow) Generate(ctx flowlet.Context) error {
	d.once.Do(func() { close(d.generating) })
	if !d.stopped.Load() {
		return flowlet.ErrIdle
	}
	<-ctx.Done()
	return fmt.Errorf("%w: %w", errDrainSlow, ctx.Err())
}

func (d *drainSlow) StopTaking() { d.stopped.Store(true) }

func init() {
	flowlet.Register("t_drainslow", func() flowlet.Flowlet { return &drainSlow{generating: make(chan struct{})} },
		flowlet.TypeInfo{Source: true, Outputs: []string{"out"}})
}
