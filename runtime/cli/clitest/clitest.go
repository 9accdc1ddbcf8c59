package clitest

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime/cli"
)

// Run runs the CLI with args in dir and returns its exit code, stdout and
// stderr. It changes the working directory for the test (t.Chdir), so the
// test must not be parallel.
func Run(t testing.TB, dir string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Chdir(dir)
	var out, errb bytes.Buffer
	code = cli.Run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// ExpectLines checks that the file at path holds exactly n lines, all
// distinct, and that they are want(0) … want(n-1) in any order (what a sink
// wrote after a run with several instances).
func ExpectLines(t testing.TB, path string, n int, want func(i int) string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	seen := make(map[string]bool, len(lines))
	for _, l := range lines {
		seen[l] = true
	}
	if len(lines) != n || len(seen) != n {
		t.Fatalf("%d lines out (%d distinct), want %d", len(lines), len(seen), n)
	}
	for i := range n {
		if w := want(i); !seen[w] {
			t.Fatalf("line %q missing", w)
		}
	}
}
