// Package clitest runs the flowrun CLI in-process for tests of packages that
// build on it (the runtime's own tests, example plugins).
package clitest

import (
	"bytes"
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
