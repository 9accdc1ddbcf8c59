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

func openSource(t *testing.T, ctx *flowlettest.Context, path string, follow bool) *FileSource {
	t.Helper()
	s := &FileSource{}
	if err := ctx.Init(s, map[string]any{"path": path, "follow": follow, "lines_per_step": 7}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// drainSource runs steps until the source is idle or at its end and
// returns the lines emitted.
func drainSource(t *testing.T, ctx *flowlettest.Context, s *FileSource) ([]string, error) {
	t.Helper()
	ctx.Reset()
	for range 10000 {
		err := ctx.Generate(s)
		if errors.Is(err, flowlet.ErrIdle) || errors.Is(err, flowlet.ErrEndOfInput) {
			return ctx.Emits("out"), nil
		}
		if err != nil {
			return ctx.Emits("out"), err
		}
	}
	t.Fatal("the source never went idle")
	return nil, nil
}

func wantLines(t *testing.T, got []string, want ...[]string) {
	t.Helper()
	var w []string
	for _, ws := range want {
		w = append(w, ws...)
	}
	if strings.Join(got, ",") != strings.Join(w, ",") {
		t.Fatalf("lines %d %.200q, want %d %.200q", len(got), got, len(w), w)
	}
}

// Another file at the source's path (not following): the committed offset
// is not a place in it. The source refuses instead of reading it from there.
func TestFileSourceReplacedAtRestart(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	ctx := flowlettest.New("src")
	writeFile(t, in, lines(records("a", 0, 100)))
	got, err := drainSource(t, ctx, openSource(t, ctx, in, false))
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("a", 0, 100))
	replaceFile(t, in, lines(records("b", 0, 500)))
	got, err = drainSource(t, ctx, openSource(t, ctx, in, false))
	if err == nil || !strings.Contains(err.Error(), in) || !strings.Contains(err.Error(), fmt.Sprint(len(lines(records("a", 0, 100))))) || !flowlet.IsPermanent(err) || len(got) > 0 {
		t.Fatalf("got %v and %d lines, want a permanent error naming %s and the offset", err, len(got), in)
	}
	// Lines appended to the same file are read on.
	replaceFile(t, in, lines(records("a", 0, 103)))
	got, err = drainSource(t, ctx, openSource(t, ctx, in, false))
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("a", 100, 103))
}

// Following, a new file at the path (rotation by rename) is read from its
// start once the old one is read to its end — also when it is larger than
// the committed offset; the same content under a new inode (an editor's
// save) goes on at the offset.
func TestFileSourceFollowRotation(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	ctx := flowlettest.New("src")
	writeFile(t, in, lines(records("a", 0, 10)))
	s := openSource(t, ctx, in, true)
	got, err := drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("a", 0, 10))
	if s.Changed() {
		t.Fatal("Changed with nothing new")
	}
	appendFile(t, in, lines(records("a", 10, 12)))
	if err := os.Rename(in, in+".1"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, in, lines(records("b", 0, 50)))
	if !s.Changed() {
		t.Fatal("a new file at the path is not a change")
	}
	// The old file's last lines, then (the switch may take an idle step
	// that reports a change) the new file's.
	got, err = drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	more, err := drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, append(got, more...), records("a", 10, 12), records("b", 0, 50))
	// An editor's save: a new inode, the same bytes and more.
	replaceFile(t, in, lines(records("b", 0, 52)))
	if !s.Changed() {
		t.Fatal("a new file at the path is not a change")
	}
	got, _ = drainSource(t, ctx, s)
	more, err = drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, append(got, more...), records("b", 50, 52))
}

// Following, a file truncated in place (copytruncate) is read from its start:
// when it is shorter than the committed offset, and when it grew past it
// again before the source looked.
func TestFileSourceFollowTruncated(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	ctx := flowlettest.New("src")
	writeFile(t, in, lines(records("a", 0, 10)))
	s := openSource(t, ctx, in, true)
	if _, err := drainSource(t, ctx, s); err != nil {
		t.Fatal(err)
	}
	writeFile(t, in, "c0\n") // O_TRUNC: the same inode
	if !s.Changed() {
		t.Fatal("no change")
	}
	got, err := drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, []string{"c0"})
	writeFile(t, in, lines(records("d", 0, 40)))
	got, err = drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("d", 0, 40))
}

// Following, a file replaced while the app was stopped is read from its
// start (the bytes before the committed offset are not the ones read);
// not following, the restart refuses it (TestFileSourceReplacedAtRestart).
func TestFileSourceFollowReplacedAtRestart(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	ctx := flowlettest.New("src")
	writeFile(t, in, lines(records("a", 0, 10)))
	if _, err := drainSource(t, ctx, openSource(t, ctx, in, true)); err != nil {
		t.Fatal(err)
	}
	replaceFile(t, in, lines(records("b", 0, 30)))
	got, err := drainSource(t, ctx, openSource(t, ctx, in, true))
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("b", 0, 30))
}

// A position written before the source recorded its path and fingerprint:
// read on from it as before, and recorded from then on.
func TestFileSourceStoreWithoutFingerprint(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	ctx := flowlettest.New("src")
	writeFile(t, in, lines(records("a", 0, 10)))
	if _, err := drainSource(t, ctx, openSource(t, ctx, in, false)); err != nil {
		t.Fatal(err)
	}
	v, _ := ctx.Get(posTable, string(posKey))
	tb := ctx.State(posTable)
	tb.Put(posKey, []byte(v)[:17])
	tb.Delete(pathKey)
	ctx.Commit()
	appendFile(t, in, lines(records("a", 10, 12)))
	got, err := drainSource(t, ctx, openSource(t, ctx, in, false))
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("a", 10, 12))
	if v, _ := ctx.Get(posTable, string(posKey)); len(v) == 17 {
		t.Error("the position has no fingerprint yet")
	}
	if p, _ := ctx.Get(posTable, string(pathKey)); p != in {
		t.Errorf("path recorded %q", p)
	}
}

// Following, a file truncated in place while the source is behind (not at
// its end) and grown past the offset again before the next step: read from
// its start, not on at the old offset in the new content (a review finding:
// d0–d19 were skipped).
func TestFollowTruncatedWhileBehind(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	ctx := flowlettest.New("src")
	writeFile(t, in, lines(records("a", 0, 20)))
	s := openSource(t, ctx, in, true)
	ctx.Reset()
	if err := ctx.Generate(s); err != nil { // 7 lines of 20: behind
		t.Fatal(err)
	}
	wantLines(t, ctx.Emits("out"), records("a", 0, 7))
	writeFile(t, in, lines(records("d", 0, 40))) // O_TRUNC in place, then more than the offset
	got, err := drainSource(t, ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, got, records("d", 0, 40))
}

// The step that records the source's path can abort (a conflict, a commit
// that failed): the next step must record it again, also when it reads
// nothing (an empty file, following), else a later run could not tell that
// the path changed under a committed offset.
func TestFileSourceRecordsPathAfterAbort(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	writeFile(t, in, "")
	ctx := flowlettest.New("src")
	s := openSource(t, ctx, in, true)
	err := s.Generate(ctx) // the first step: checks the position, records the path
	if err != nil && !errors.Is(err, flowlet.ErrIdle) {
		t.Fatal(err)
	}
	ctx.Abort()
	if o, ok := any(s).(interface{ Aborted() }); ok {
		o.Aborted() // as the runtime tells a StepObserver
	}
	if err := ctx.Generate(s); err != nil && !errors.Is(err, flowlet.ErrIdle) {
		t.Fatal(err)
	}
	if got, ok := ctx.Get(posTable, string(pathKey)); !ok {
		t.Fatalf("path not recorded after the aborted step (got %q)", got)
	}
}
