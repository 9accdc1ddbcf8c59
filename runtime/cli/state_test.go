package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

// testCounts counts each payload in the counters "counts" and keeps the
// last one in the table "last" under "k".
type testCounts struct{}

func (testCounts) Process(ctx flowlet.Context, ev flowlet.Event) error {
	if err := ctx.Counters("counts").Add(ev.Payload, 1); err != nil {
		return err
	}
	return ctx.State("last").Put([]byte("k"), ev.Payload)
}

func init() {
	flowlet.Register("clitest_counts", func() flowlet.Flowlet { return testCounts{} }, flowlet.TypeInfo{Sink: true, Doc: "test: counts payloads"})
}

// writeApp writes an app file into dir.
func writeApp(t testing.TB, dir, name, src string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// state get and scan: an unknown flowlet is an error listing the known
// ones (it read as "no state", exit 0); a counter never added to is a
// missing key, exit 1 as the spec says (it read 0); --counters on a table
// of key-value data is an error (it read 0 for every key); dlq ls of an
// unknown flowlet is an error too.
func TestStateErrors(t *testing.T) {
	app, data := drainedApp(t, `app: counting
flowlets:
  gen: {type: generator, config: {count: 3, payload: "p{seq}"}}
  cnt: {type: clitest_counts}
connections:
  - {from: gen, to: cnt}
`)
	code, out := runCLI(t, "state", "scan", "--data", data, app, "cnt", "counts")
	if code != 0 || !strings.Contains(out, "p1\t1") {
		t.Fatalf("state scan cnt counts: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"get", app, "nope"}, ExitFailure, `app "counting" has no flowlet "nope" (flowlets: cnt, gen)`},
		{[]string{"scan", app, "nope"}, ExitFailure, `app "counting" has no flowlet "nope" (flowlets: cnt, gen)`},
		{[]string{"get", "counting", "nope"}, ExitFailure, `app "counting" has no flowlet "nope" (flowlets in its store: cnt, gen)`},
		{[]string{"get", "counting", "cnt"}, 0, "counts\tcounters"},
		{[]string{"get", app, "cnt", "counts", "p1"}, 0, "1\n"},
		{[]string{"get", app, "cnt", "counts", "999"}, ExitFailure, `counter table "counts" of flowlet "cnt" has no key "999"`},
		{[]string{"get", app, "cnt", "counts", "999", "--counters"}, ExitFailure, `has no key "999"`},
		{[]string{"get", app, "cnt", "last", "k"}, 0, "p"},
		{[]string{"get", app, "cnt", "last", "k", "--counters"}, ExitFailure, `table "last" of flowlet "cnt" holds key-value data, not counters`},
		{[]string{"scan", app, "cnt", "last", "--counters"}, ExitFailure, "not counters"},
	} {
		code, out := runCLI(t, append([]string{"state", "--data", data}, tc.args...)...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("state %s: exit %d, want %d and %q\n%s", strings.Join(tc.args, " "), code, tc.code, tc.want, out)
		}
	}
	// dlq ls checks its flowlet the same way.
	if code, out := runCLI(t, "dlq", "ls", "--data", data, app, "nope"); code != ExitFailure || !strings.Contains(out, `app "counting" has no flowlet "nope"`) {
		t.Errorf("dlq ls of an unknown flowlet: exit %d\n%s", code, out)
	}
	if code, out := runCLI(t, "dlq", "ls", "--data", data, app, "cnt"); code != 0 || !strings.Contains(out, "no dead letters") {
		t.Errorf("dlq ls cnt: exit %d\n%s", code, out)
	}
}

// queue tail prints key names as it prints their values: printable (a key
// name with an escape sequence went to the terminal raw).
func TestQueueTailEscapesKeyNames(t *testing.T) {
	app, data := drainedApp(t, `app: esc
flowlets:
  gen: {type: generator, config: {count: 1, payload: "p{seq}", keys: {"k\e[2J": "v"}}}
  cnt: {type: clitest_counts}
connections:
  - {from: gen, to: cnt}
`)
	code, stdout, stderr := runCLI2(t, "queue", "tail", "--data", data, app, "gen.out")
	if code != 0 || strings.Contains(stdout, "\x1b") || !strings.Contains(stdout, `"k\x1b[2J"=v`) {
		t.Fatalf("queue tail: exit %d\nstdout: %q\nstderr: %s", code, stdout, stderr)
	}
}

// state get prints a value as state scan does: printable (a valid UTF-8
// value went to the terminal raw, escape sequences and all).
func TestStateGetEscapes(t *testing.T) {
	app, data := drainedApp(t, `app: esc
flowlets:
  gen: {type: generator, config: {count: 1, payload: "p\e]0;owned\a{seq}"}}
  cnt: {type: clitest_counts}
connections:
  - {from: gen, to: cnt}
`)
	for _, args := range [][]string{{"get", app, "cnt", "last", "k"}, {"scan", app, "cnt", "last"}} {
		code, stdout, stderr := runCLI2(t, append([]string{"state", "--data", data}, args...)...)
		if code != 0 || strings.ContainsAny(stdout, "\x1b\a") || !strings.Contains(stdout, `"p\x1b]0;owned\a0"`) {
			t.Errorf("state %s: exit %d\nstdout: %q\nstderr: %s", args[0], code, stdout, stderr)
		}
	}
}
