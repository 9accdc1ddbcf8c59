package builtin

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// lineReader hands out the lines l0, l1, … ln-1, one per Read.
type lineReader struct{ i, n int }

func (r *lineReader) Read(p []byte) (int, error) {
	if r.i == r.n {
		return 0, io.EOF
	}
	r.i++
	return copy(p, fmt.Sprintf("l%d\n", r.i-1)), nil
}

// TestStdinSourceReadsAheadBounded: the stdin source reads ahead of its
// steps only so far (two steps' worth of lines): while its steps do not
// run — back-pressure holds the source, a slow step, or it stopped — the
// rest stays in the pipe, whose writer then waits. It read all of its
// input into memory, however large, ahead of the steps. Every line is
// still emitted once, in order.
func TestStdinSourceReadsAheadBounded(t *testing.T) {
	const total, perStep = 3000, 10
	// The first step waits until the reader has read ahead as far as it
	// may: it would race ahead of any step otherwise.
	s, ctx, pending := readAhead(t, total, perStep)
	var got []string
	for {
		if n := pending(); n > 2*perStep {
			t.Fatalf("%d lines read ahead of the steps, want at most %d", n, 2*perStep)
		}
		ctx.Reset()
		err := ctx.Generate(s)
		got = append(got, ctx.Emits("out")...)
		if errors.Is(err, flowlet.ErrEndOfInput) {
			break
		}
		if errors.Is(err, flowlet.ErrIdle) {
			<-s.Ready()
		} else if err != nil {
			t.Fatal(err)
		}
	}
	want := make([]string, total)
	for i := range want {
		want[i] = fmt.Sprintf("l%d", i)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("%d lines emitted, want the %d in order", len(got), total)
	}
}

// A lines_per_step so large that two steps' worth overflows an int: the
// reader kept waiting for room that never came (the source idled for
// good).
func TestStdinSourceHugeLinesPerStep(t *testing.T) {
	s := &StdinSource{in: &lineReader{n: 5}}
	ctx := flowlettest.New("stdin")
	if err := ctx.Init(s, map[string]any{"lines_per_step": math.MaxInt}); err != nil {
		t.Fatal(err)
	}
	if got := drainStdin(t, ctx, s); len(got) != 5 {
		t.Fatalf("%d lines, want 5", len(got))
	}
}

// readAhead starts a stdin source over n lines, lines_per_step perStep,
// and returns once its reader has read ahead as far as it may (two steps'
// worth), with a count of the lines it holds.
func readAhead(t *testing.T, n, perStep int) (*StdinSource, *flowlettest.Context, func() int) {
	t.Helper()
	s := &StdinSource{in: &lineReader{n: n}}
	ctx := flowlettest.New("stdin")
	if err := ctx.Init(s, map[string]any{"lines_per_step": perStep}); err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending)
	}
	for pending() < 2*perStep {
		<-s.Ready()
	}
	return s, ctx, pending
}
