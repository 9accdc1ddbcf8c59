package builtin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// A store outlives its FileSink and FileSource: a "run" is a new flowlet on
// the same flowlettest.Context, as a restart is a new flowlet on the same
// data directory.

func openSink(t *testing.T, ctx *flowlettest.Context, path string) *FileSink {
	t.Helper()
	s := &FileSink{}
	if err := ctx.Init(s, map[string]any{"path": path, "fsync": false}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// publish runs Publish as a step of its own, as the runtime does.
func publish(ctx *flowlettest.Context, s *FileSink) error {
	if err := s.Publish(ctx); err != nil {
		ctx.Abort()
		return err
	}
	ctx.Commit()
	return nil
}

// sinkRun is a run of a sink on path: its first publish, then steps of
// records (each followed by a publish).
func sinkRun(t *testing.T, ctx *flowlettest.Context, path string, steps ...[]string) error {
	t.Helper()
	s := openSink(t, ctx, path)
	defer s.Close()
	if err := publish(ctx, s); err != nil {
		return err
	}
	for _, recs := range steps {
		var evs []flowlet.Event
		for _, r := range recs {
			evs = append(evs, flowlettest.Event(r))
		}
		if err := ctx.Process(s, evs...); err != nil {
			t.Fatal(err)
		}
		if err := publish(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func records(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func lines(recs ...[]string) string {
	var b strings.Builder
	for _, rs := range recs {
		for _, r := range rs {
			b.WriteString(r + "\n")
		}
	}
	return b.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile puts a new file (a new inode) with content s at path, as
// log rotation or an editor's save do.
func replaceFile(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".new"
	writeFile(t, tmp, s)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// Another file at the sink's own path (the output moved away, a larger file
// put there) is not the sink's output: the sink refuses it, unchanged, instead
// of cutting it to the committed size.
func TestFileSinkReplacedAtSamePath(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	ctx := flowlettest.New("out")
	if err := sinkRun(t, ctx, out, records("r", 0, 600)); err != nil {
		t.Fatal(err)
	}
	other := lines(records("someone else's line ", 0, 1000))
	replaceFile(t, out, other)
	err := sinkRun(t, ctx, out, records("r", 600, 700))
	if err == nil || !strings.Contains(err.Error(), out) || !flowlet.IsPermanent(err) {
		t.Errorf("got %v, want a permanent error naming %s", err, out)
	}
	if got := readFile(t, out); got != other {
		t.Fatalf("the other file changed: %d bytes, was %d", len(got), len(other))
	}
}

// A sink whose output is still empty (nothing committed, no publish
// unfinished) has nothing to lose: pointed at a file holding data, it keeps
// the data and appends, as for a new store.
func TestFileSinkEmptyOutputThenOtherFile(t *testing.T) {
	dir := t.TempDir()
	ctx := flowlettest.New("out")
	if err := sinkRun(t, ctx, filepath.Join(dir, "out.txt")); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.txt")
	writeFile(t, other, "precious\n")
	if err := sinkRun(t, ctx, other, records("r", 0, 2)); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, other); got != "precious\nr0\nr1\n" {
		t.Fatalf("other.txt = %q", got)
	}
}

// A publish that wrote and died before its commit, then the output renamed
// and the path changed with it: the file is the sink's (its committed bytes
// match), the unfinished bytes are cut off and come again.
func TestFileSinkUnfinishedPublishThenRenamed(t *testing.T) {
	dir := t.TempDir()
	out, moved := filepath.Join(dir, "out.txt"), filepath.Join(dir, "moved.txt")
	ctx := flowlettest.New("out")
	if err := sinkRun(t, ctx, out, records("r", 0, 1000)); err != nil {
		t.Fatal(err)
	}
	s := openSink(t, ctx, out)
	if err := publish(ctx, s); err != nil {
		t.Fatal(err)
	}
	var evs []flowlet.Event
	for _, r := range records("r", 1000, 1010) {
		evs = append(evs, flowlettest.Event(r))
	}
	if err := ctx.Process(s, evs...); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	ctx.Abort() // died before the commit
	s.Close()
	appendFile(t, out, "r10") // and more of a write
	if err := os.Rename(out, moved); err != nil {
		t.Fatal(err)
	}
	if err := sinkRun(t, ctx, moved, records("r", 1010, 1020)); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, moved), lines(records("r", 0, 1020)); got != want {
		t.Fatalf("moved.txt: %d bytes, want %d", len(got), len(want))
	}
}

// A publish whose commit failed is written again by the next one; the
// fingerprint recorded then is of the file as it is (a restart accepts it).
func TestFileSinkPublishAbortedThenAgain(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	ctx := flowlettest.New("out")
	s := openSink(t, ctx, out)
	if err := publish(ctx, s); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var evs []flowlet.Event
		for _, r := range records(fmt.Sprintf("s%d-", i), 0, 700) {
			evs = append(evs, flowlettest.Event(r))
		}
		if err := ctx.Process(s, evs...); err != nil {
			t.Fatal(err)
		}
		if err := s.Publish(ctx); err != nil {
			t.Fatal(err)
		}
		ctx.Abort()
		if err := publish(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if err := sinkRun(t, ctx, out, []string{"last"}); err != nil {
		t.Fatal(err)
	}
	want := lines(records("s0-", 0, 700), records("s1-", 0, 700), records("s2-", 0, 700), []string{"last"})
	if got := readFile(t, out); got != want {
		t.Fatalf("out.txt: %d bytes, want %d", len(got), len(want))
	}
}

// A store written before fingerprints were recorded: the same path works
// as before (an unfinished publish is cut off); a changed path whose old
// file is gone is taken only at exactly the committed size.
func TestFileSinkStoreWithoutFingerprint(t *testing.T) {
	dir := t.TempDir()
	out, moved := filepath.Join(dir, "out.txt"), filepath.Join(dir, "moved.txt")
	ctx := flowlettest.New("out")
	forget := func() {
		if err := ctx.State(sinkTable).Delete(tailKey); err != nil {
			t.Fatal(err)
		}
		ctx.Commit()
	}
	if err := sinkRun(t, ctx, out, records("r", 0, 10)); err != nil {
		t.Fatal(err)
	}
	forget()
	appendFile(t, out, "r10\npart")
	if err := sinkRun(t, ctx, out, records("r", 10, 20)); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, out), lines(records("r", 0, 20)); got != want {
		t.Fatalf("out.txt = %q, want %q", got, want)
	}
	forget()
	if err := os.Rename(out, moved); err != nil {
		t.Fatal(err)
	}
	appendFile(t, moved, "more")
	err := sinkRun(t, ctx, moved, records("r", 20, 30))
	if err == nil || !strings.Contains(err.Error(), out) || !strings.Contains(err.Error(), moved) {
		t.Fatalf("got %v, want an error naming both files", err)
	}
	if got, want := readFile(t, moved), lines(records("r", 0, 20))+"more"; got != want {
		t.Fatalf("moved.txt changed: %q", got)
	}
	if err := os.Truncate(moved, int64(len(lines(records("r", 0, 20))))); err != nil {
		t.Fatal(err)
	}
	if err := sinkRun(t, ctx, moved, records("r", 20, 30)); err != nil {
		t.Fatal(err)
	}
	if got, want := readFile(t, moved), lines(records("r", 0, 30)); got != want {
		t.Fatalf("moved.txt = %q, want %q", got, want)
	}
}
