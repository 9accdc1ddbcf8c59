package builtin

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// A last line without "\n" whose bytes end exactly where the reader's
// buffer fills (256 KiB for a file, 64 KiB for stdin, or a multiple) came
// as a full buffer and then an end of file with no bytes: both sources
// dropped the line they had collected — silently, the file source at
// every try.
func TestLastLineAtBufferSize(t *testing.T) {
	for _, n := range []int{64 << 10, 256 << 10, 512 << 10} {
		last := strings.Repeat("z", n)
		input := "a\nb\n" + last
		want := []string{"a", "b", last}

		in := filepath.Join(t.TempDir(), "in.txt")
		writeFile(t, in, input)
		ctx := flowlettest.New("src")
		got, err := drainSource(t, ctx, openSource(t, ctx, in, false))
		if err != nil {
			t.Fatal(err)
		}
		if !sameLines(got, want) {
			t.Errorf("file_source, last line of %d bytes: %d lines, last of %d bytes; want 3, the last of %d", n, len(got), len(got[len(got)-1]), n)
		}

		ctx = flowlettest.New("stdin")
		s := &StdinSource{in: strings.NewReader(input)}
		if err := ctx.Init(s, nil); err != nil {
			t.Fatal(err)
		}
		got = drainStdin(t, ctx, s)
		if !sameLines(got, want) {
			t.Errorf("stdin_source, last line of %d bytes: %d lines; want 3, the last of %d bytes", n, len(got), n)
		}
	}
}

// drainStdin runs s's steps until the end of its input, waiting for it
// whenever it idles, and returns the lines emitted. A minute without the
// end of input fails the test (a reader that waits for good).
func drainStdin(t *testing.T, ctx *flowlettest.Context, s *StdinSource) []string {
	t.Helper()
	hang := time.After(time.Minute)
	var got []string
	for {
		ctx.Reset()
		err := ctx.Generate(s)
		got = append(got, ctx.Emits("out")...)
		switch {
		case errors.Is(err, flowlet.ErrEndOfInput):
			return got
		case errors.Is(err, flowlet.ErrIdle):
			select {
			case <-s.Ready():
			case <-hang:
				t.Fatalf("no end of input after %d lines", len(got))
			}
		case err != nil:
			t.Fatal(err)
		}
	}
}

func sameLines(got, want []string) bool {
	return strings.Join(got, "\n") == strings.Join(want, "\n")
}

// The same for a last line too long for max_line_bytes: it is
// dead-lettered and over at the end of the file, so a line appended later
// is read (it was taken for the rest of the long line and skipped when the
// long line's bytes ended exactly at a full buffer).
func TestTooLongLastLineAtBufferSize(t *testing.T) {
	for _, n := range []int{256 << 10, 256<<10 + 1} {
		in := filepath.Join(t.TempDir(), "in.txt")
		writeFile(t, in, "a\n"+strings.Repeat("z", n))
		ctx := flowlettest.New("src")
		open := func() *FileSource {
			s := &FileSource{}
			if err := ctx.Init(s, map[string]any{"path": in, "max_line_bytes": 1000}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		got, err := drainSource(t, ctx, open())
		if err != nil {
			t.Fatal(err)
		}
		if !sameLines(got, []string{"a"}) || len(ctx.DeadLetters()) != 1 {
			t.Fatalf("last line of %d bytes: lines %q, %d dead letters; want a and 1", n, got, len(ctx.DeadLetters()))
		}
		writeFile(t, in, "a\n"+strings.Repeat("z", n)+"b\n")
		got, err = drainSource(t, ctx, open())
		if err != nil {
			t.Fatal(err)
		}
		if !sameLines(got, []string{"b"}) {
			t.Errorf("last line of %d bytes, then b appended: lines %.20q; want b", n, got)
		}
	}
}

// TestStdinSourceDeadLetterNamesLine: a line of standard input over
// max_line_bytes is dead-lettered with its number in the input (from 1),
// so that it can be found; the lines around it are emitted.
func TestStdinSourceDeadLetterNamesLine(t *testing.T) {
	long := strings.Repeat("z", 30)
	s := &StdinSource{in: strings.NewReader("a\n" + long + "\nb\n\n" + long + "y")}
	ctx := flowlettest.New("stdin")
	if err := ctx.Init(s, map[string]any{"max_line_bytes": 10}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := drainStdin(t, ctx, s); !sameLines(got, []string{"a", "b", ""}) {
		t.Fatalf("lines %q, want a, b and an empty one", got)
	}
	dead := ctx.DeadLetters()
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want the 2 long lines'", len(dead))
	}
	for i, no := range []int{2, 5} {
		if want := fmt.Sprintf("line %d of standard input is longer than max_line_bytes (10)", no); !strings.HasPrefix(dead[i].Reason, want) {
			t.Errorf("dead letter %d: %q, want it to start with %q", i, dead[i].Reason, want)
		}
	}
}
