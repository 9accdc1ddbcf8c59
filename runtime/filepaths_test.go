package runtime_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// runErr opens and runs an app to the end of its input and returns the error
// of Open or Run (nil when it drained).
func runErr(t *testing.T, dir, yaml string) error {
	t.Helper()
	a, err := runtime.Open(plan(t, dir, yaml), runtime.Options{NoSync: true, Drain: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		return err
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return a.Run(ctx)
}

// numbered writes the lines prefix1 … prefixN to path.
func numbered(t *testing.T, path, prefix string, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s%d\n", prefix, i)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A user review: the output was moved away, another file put at a new path,
// and the sink's path changed to it. The sink took that file for its own
// output (the old one is gone: the "moved project" rule) and truncated it to
// the committed size. It must refuse a file it cannot tell is its own, and
// leave it as it is.
func TestFileSinkPathChangedToAnotherFile(t *testing.T) {
	dir := t.TempDir()
	out, other := filepath.Join(dir, "out.txt"), filepath.Join(dir, "other.txt")
	runDrain(t, dir, sinkApp(out, 1000), runtime.Options{NoSync: true}).Close()
	if err := os.Rename(out, filepath.Join(dir, "archive.txt")); err != nil {
		t.Fatal(err)
	}
	want := numbered(t, other, "", 20000)
	err := runErr(t, dir, sinkApp(other, 1000))
	if err == nil || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), out) {
		t.Errorf("got %v, want an error naming %s and %s", err, other, out)
	}
	if got, _ := os.ReadFile(other); !bytes.Equal(got, want) {
		t.Fatalf("other.txt changed: %d bytes, was %d", len(got), len(want))
	}
	// The output moved to the new path is the sink's: it goes on there.
	if err := os.Rename(filepath.Join(dir, "archive.txt"), other); err != nil {
		t.Fatal(err)
	}
	runDrain(t, dir, sinkApp(other, 1500), runtime.Options{NoSync: true}).Close()
	b, _ := os.ReadFile(other)
	if n := bytes.Count(b, []byte("\n")); n != 1500 || !bytes.HasSuffix(b, []byte("event 1499\n")) {
		t.Fatalf("after moving the output there: %d lines", n)
	}
}

// A user review: a file_source's path changed under a store with a committed
// offset; the new file was read on from that offset, its first lines never
// read, without a word. It must refuse, naming both files and the offset; a
// project moved whole (the file at the new path is the one read) goes on.
func TestFileSourcePathChanged(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "one")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	app := func(in string) string {
		return `
app: t
flowlets:
  src: {type: file_source, config: {path: ` + in + `, lines_per_step: 100}}
  c: {type: t_count}
connections:
  - {from: src, to: c}
`
	}
	in1, in2 := filepath.Join(dir, "in1.txt"), filepath.Join(dir, "in2.txt")
	a1 := numbered(t, in1, "a", 1000)
	numbered(t, in2, "b", 3000)
	runDrain(t, dir, app(in1), runtime.Options{NoSync: true}).Close()
	err := runErr(t, dir, app(in2))
	if err == nil || !strings.Contains(err.Error(), in1) || !strings.Contains(err.Error(), in2) || !strings.Contains(err.Error(), fmt.Sprint(len(a1))) {
		t.Fatalf("got %v, want an error naming %s, %s and the offset %d", err, in1, in2, len(a1))
	}
	// The project moved whole, and more lines appended: only they are new.
	moved := filepath.Join(root, "two")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(moved, "in1.txt"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("a1001\n")
	f.Close()
	a := runDrain(t, moved, app(filepath.Join(moved, "in1.txt")), runtime.Options{NoSync: true})
	defer a.Close()
	if n := counter(t, a, "c", "n", "total"); n != 1001 {
		t.Fatalf("after the move: %d lines in all, want 1001", n)
	}
	if n := counter(t, a, "c", "seen", "a1001"); n != 1 {
		t.Fatalf("a1001 seen %d times", n)
	}
}
