package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAppArgNotAName: an APP that is neither an app file nor an app name
// is refused, naming the rule. It was taken as a name and joined to
// .flowrun/, so "../x" read the directory x, and turned an empty one into
// a store (exit 0); a misspelled file name said "no store at .flowrun/...".
func TestAppArgNotAName(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, args := range [][]string{
		{"queue", "ls", "../x"},
		{"dlq", "ls", "../x"},
		{"state", "get", "../x", "f"},
		{"status", "../x"},
		{"queue", "ls", "app.yam"},
	} {
		code, stdout, stderr := runCLI2(t, args...)
		if code != ExitFailure || stdout != "" || !strings.Contains(stderr, "is neither an app file") || !strings.Contains(stderr, "nor an app name ([a-z0-9][a-z0-9_-]{0,62})") {
			t.Errorf("%v: exit %d, want 1 naming the rule\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
	}
	if es, err := os.ReadDir(filepath.Join(dir, "x")); err != nil || len(es) != 0 {
		t.Errorf("x holds %d files (%v), want none", len(es), err)
	}
}

// TestAppArgForms: what the APP check must keep reading (a second read of
// it): a name with digits, '_' and '-' (the store under .flowrun/), the app
// file given relative, absolute, through a symlink, without an extension,
// and a directory that has the app's name (it is the name, not the file).
func TestAppArgForms(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	app := writeApp(t, dir, "app.yaml", `app: a_1-b2
flowlets:
  gen: {type: generator, config: {count: 2}}
  cnt: {type: clitest_counts}
connections:
  - {from: gen, to: cnt}
`)
	if code, out := runCLI(t, "run", "--drain", "--progress", "never", "--no-sync", "--http", "off", "app.yaml"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	if err := os.Symlink(app, filepath.Join(dir, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("app.yaml", filepath.Join(dir, "appfile")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "a_1-b2"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"a_1-b2", "app.yaml", "./app.yaml", "sub/../app.yaml", app, "link.yaml", "appfile"} {
		if code, out := runCLI(t, "queue", "ls", a); code != 0 || !strings.Contains(out, "gen.out") {
			t.Errorf("queue ls %s: exit %d, want the app's queues\n%s", a, code, out)
		}
	}
}
