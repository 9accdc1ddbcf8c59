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
