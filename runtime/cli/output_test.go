package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

// testFail is a source whose every step fails.
type testFail struct{}

func (testFail) Generate(flowlet.Context) error { return errors.New("broken input") }

func init() {
	flowlet.Register("clitest_fail", func() flowlet.Flowlet { return testFail{} }, flowlet.TypeInfo{Source: true, Doc: "test: a source that always fails"})
}

// runCLI2 runs the CLI in process and returns stdout and stderr apart.
func runCLI2(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// A source that gave up fails run --drain: the summary says the run stopped
// on an error, not that it drained (the drain itself completed). And dlq
// replay that fails prints only its error, no "replayed 0" first.
func TestFailedRunOutput(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	app := writeApp(t, dir, "app.yaml", `app: failing
flowlets:
  src: {type: clitest_fail, retries: {max: 0}}
  cnt: {type: clitest_counts}
connections:
  - {from: src, to: cnt}
`)
	code, out := runCLI(t, "run", "--drain", "--progress", "never", "--no-sync", "--http", "off", "--data", data, app)
	if code != ExitFailure || !strings.Contains(out, "app failing stopped on an error after") || strings.Contains(out, "drained after") ||
		!strings.Contains(out, "broken input") {
		t.Fatalf("run --drain with a failing source: exit %d, want 1 and no \"drained\" in the summary\n%s", code, out)
	}

	code, stdout, stderr := runCLI2(t, "dlq", "replay", "--data", data, app, "src")
	if code != ExitFailure || stdout != "" || !strings.Contains(stderr, "consumes no input") {
		t.Errorf("dlq replay of a source: exit %d, want 1, only the error\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI2(t, "dlq", "replay", "--data", data, app, "cnt")
	if code != 0 || !strings.Contains(stdout, "replayed 0 dead letter(s) of cnt") {
		t.Errorf("dlq replay: exit %d\n%s", code, stdout)
	}
}

// validate --json answers on stdout whatever the problem, also when the file
// cannot be read at all.
func TestValidateJSONMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	code, stdout, _ := runCLI2(t, "validate", "--json", missing)
	var out struct {
		Valid  bool `json:"valid"`
		Errors []struct {
			File    string `json:"file"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != ExitFailure {
		t.Fatalf("exit %d, stdout %q: %v", code, stdout, err)
	}
	if out.Valid || len(out.Errors) != 1 || out.Errors[0].File != missing || !strings.Contains(out.Errors[0].Message, "no such file") {
		t.Errorf("got %+v", out)
	}
}
