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
			failed := errors.New("too large (test)")
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
