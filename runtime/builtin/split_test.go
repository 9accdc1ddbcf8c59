package builtin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// splitSource is a source that is a runtime.StepSplitter.
type splitSource interface {
	flowlet.Source
	SplitStep() bool
	DropStep(err error)
}

// TestSourceSplitStepLimit: after a step too large or too slow (SplitStep)
// file_source, stdin_source and generator take half its records a step,
// and after limitRestoreAfter commits as many as before; a step of one
// record is not split, and given up (DropStep) it is dead-lettered alone
// in the next step, the position past it.
func TestSourceSplitStepLimit(t *testing.T) {
	const perStep, total = 16, 200
	for _, typ := range []string{"file_source", "stdin_source", "generator"} {
		t.Run(typ, func(t *testing.T) {
			ctx := flowlettest.New("src")
			var s splitSource
			var config map[string]any
			switch typ {
			case "file_source":
				var in strings.Builder
				for i := range total {
					fmt.Fprintf(&in, "l%d\n", i)
				}
				path := filepath.Join(t.TempDir(), "in.txt")
				if err := os.WriteFile(path, []byte(in.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				s, config = &FileSource{}, map[string]any{"path": path, "lines_per_step": perStep}
			case "stdin_source":
				s, config = &StdinSource{in: &lineReader{n: total}}, map[string]any{"lines_per_step": perStep}
			case "generator":
				s, config = &Generator{}, map[string]any{"count": total, "batch": perStep, "payload": "l{seq}"}
			}
			if err := ctx.Init(s, config); err != nil {
				t.Fatal(err)
			}
			if c, ok := s.(flowlet.Closer); ok {
				defer c.Close()
			}
			obs, _ := s.(interface {
				Committed()
				Aborted()
			})
			// step runs a step that commits or aborts and returns the
			// records it emitted and dead-lettered.
			step := func(commit bool) (emitted, dead int) {
				t.Helper()
				if std, ok := s.(*StdinSource); ok {
					waitLines(std, perStep) // the reader keeps ahead
				}
				e0, d0 := len(ctx.Emits("out")), len(ctx.DeadLetters())
				if err := s.Generate(ctx); err != nil {
					t.Fatal(err)
				}
				if !commit {
					ctx.Abort()
					if obs != nil {
						obs.Aborted()
					}
					return 0, 0
				}
				ctx.Commit()
				if obs != nil {
					obs.Committed()
				}
				return len(ctx.Emits("out")) - e0, len(ctx.DeadLetters()) - d0
			}
			step(false)
			if !s.SplitStep() {
				t.Fatalf("a step of %d records was not split", perStep)
			}
			for i := range limitRestoreAfter {
				if n, _ := step(true); n != perStep/2 {
					t.Fatalf("step %d after the split: %d records, want %d", i, n, perStep/2)
				}
			}
			if n, _ := step(true); n != perStep {
				t.Fatalf("after %d commits a step took %d records, want %d again", limitRestoreAfter, n, perStep)
			}
			for range 4 { // split down to one record
				step(false)
				s.SplitStep()
			}
			step(false)
			if s.SplitStep() {
				t.Fatal("a step of one record was split")
			}
			failed := flowlet.Permanent(errors.New("too large (test)")) // as the runtime gives a too-large one
			s.DropStep(failed)
			next := len(ctx.Emits("out"))
			if n, dead := step(true); n != 0 || dead != 1 {
				t.Fatalf("the step after the drop: %d emitted, %d dead-lettered, want its record dead-lettered alone", n, dead)
			}
			d := ctx.DeadLetters()[0]
			want := fmt.Sprintf("l%d", next)
			if string(d.Payload) != want || !strings.Contains(d.Reason, "fails alone") || !strings.Contains(d.Reason, failed.Error()) {
				t.Errorf("dead letter %q: %s, want %s's, saying its step fails alone", d.Payload, d.Reason, want)
			}
			// It says where the record is (stdin's lines by their number, from 1).
			where := map[string]string{"file_source": "line at offset ", "stdin_source": fmt.Sprintf("line %d of standard input:", next+1), "generator": fmt.Sprintf("event %d:", next)}[typ]
			if !strings.HasPrefix(d.Reason, where) {
				t.Errorf("dead letter %q: %s, want it to start with %q", d.Payload, d.Reason, where)
			}
			if step(true); ctx.Emits("out")[next] != fmt.Sprintf("l%d", next+1) {
				t.Errorf("after the dead-lettered %s came %s", want, ctx.Emits("out")[next])
			}
		})
	}
}

// waitLines waits until the stdin source's reader holds n lines ahead.
func waitLines(s *StdinSource, n int) {
	for {
		s.mu.Lock()
		have := len(s.pending)
		s.mu.Unlock()
		if have >= n {
			return
		}
		<-s.Ready()
	}
}

// abortStep runs a step of s whose commit fails (as a step too large or
// too slow does in the runtime): its writes and emits are dropped.
func abortStep(t *testing.T, ctx *flowlettest.Context, s flowlet.Source) {
	t.Helper()
	if err := s.Generate(ctx); err != nil && !errors.Is(err, flowlet.ErrIdle) && !errors.Is(err, flowlet.ErrEndOfInput) {
		t.Fatal(err)
	}
	ctx.Abort()
}

// TestFileSourceDropAfterRotation: following, the first line of a rotated
// (here truncated) file fails alone; given up (DropStep), the next step
// dead-letters it. The drop was forgotten there, as the committed offset
// still was the old file's: the line came again, failed alone again, and
// so on for good.
func TestFileSourceDropAfterRotation(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.txt")
	ctx := flowlettest.New("src")
	writeFile(t, in, lines(records("a", 0, 10)))
	s := openSource(t, ctx, in, true)
	if _, err := drainSource(t, ctx, s); err != nil {
		t.Fatal(err)
	}
	writeFile(t, in, lines(records("b", 0, 2))) // truncated in place: read from its start
	abortStep(t, ctx, s)
	if !s.SplitStep() {
		t.Fatal("a step of 2 lines was not split")
	}
	abortStep(t, ctx, s)
	if s.SplitStep() {
		t.Fatal("a step of one line was split")
	}
	s.DropStep(flowlet.Permanent(errors.New("too large (test)")))
	got, err := drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("b", 1, 2))
	if d := ctx.DeadLetters(); len(d) != 1 || string(d[0].Payload) != "b0" {
		t.Fatalf("dead letters %+v, want b0's alone", d)
	}
}

// TestFileSourceDropOfStepWithoutLines: a step that read no line but moved
// the offset (following, inside a too-long line being written) fails
// alone; DropStep has no line to give up. The next line, which never
// failed, was dead-lettered in its place.
func TestFileSourceDropOfStepWithoutLines(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.txt")
	ctx := flowlettest.New("src")
	long := strings.Repeat("y", 300<<10) // over the reader's buffer: dead-lettered before its "\n"
	writeFile(t, in, "a0\n"+long)
	s := &FileSource{}
	if err := ctx.Init(s, map[string]any{"path": in, "follow": true, "max_line_bytes": 10}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	got, err := drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, []string{"a0"})
	appendFile(t, in, long) // the long line goes on: a step that skips it, no line
	abortStep(t, ctx, s)
	if s.SplitStep() {
		t.Fatal("a step of no line was split")
	}
	s.DropStep(errors.New("too slow (test)"))
	appendFile(t, in, "\n"+lines(records("c", 0, 2)))
	if got, err = drainSource(t, ctx, s); err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("c", 0, 2))
	if d := ctx.DeadLetters(); len(d) != 1 || !strings.Contains(d[0].Reason, "longer than max_line_bytes") {
		t.Fatalf("dead letters %+v, want the long line's alone", d)
	}
}
