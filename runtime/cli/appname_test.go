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
