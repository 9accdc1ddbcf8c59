package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// Bad flag values are a bad command line (exit 2) naming the flag, checked
// before anything opens or runs: non-positive intervals used to panic
// (time.NewTicker), negative counts to read as "all", an unknown --progress
// as "auto".
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	app := filepath.Join(dir, "missing.yaml") // never read: the flags fail first
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"top", "x", "--interval", "0"}, "--interval must be positive, not 0s"},
		{[]string{"top", "x", "--interval", "-1s"}, "--interval must be positive, not -1s"},
		{[]string{"top", "x", "-n", "-3"}, "-n/--iterations must be 0 or more, not -3"},
		{[]string{"run", "--drain", "--progress", "always", "--progress-interval", "0", app}, "--progress-interval must be positive"},
		{[]string{"run", "--progress", "sometimes", app}, `--progress must be auto, always or never, not "sometimes"`},
		{[]string{"queue", "tail", "x", "q", "-n", "-1"}, "-n/--lines must be 0 or more, not -1"},
		{[]string{"queue", "tail", "x", "q", "--from", "abc"}, `--from: want an entry id such as 3/0/1042.0.7 or a write pointer such as 1042, not "abc"`},
		{[]string{"queue", "tail", "x", "q", "--since", "yesterday"}, `--since: want a time such as 2026-11-21T10:00:00Z or a duration ago such as 10m, not "yesterday"`},
		{[]string{"state", "scan", "x", "f", "-n", "-1"}, "-n/--limit must be 0 or more, not -1"},
		{[]string{"dlq", "ls", "x", "-n", "-1"}, "-n/--limit must be 0 or more, not -1"},
		{[]string{"plan", "--dot", "--json", app}, "[dot json] were all set"},
		// A mistyped subcommand used to print the group's help and exit 0,
		// and a bad log flag to pass unseen where nothing logs.
		// With a suggestion, as cobra makes for a mistyped command (the
		// group's own distance was 0: only prefixes were suggested).
		{[]string{"queue", "tial", "x", "q"}, `unknown command "tial" for "flowrun queue" (did you mean tail?)`},
		{[]string{"state", "scna", "x", "f"}, `unknown command "scna" for "flowrun state" (did you mean scan?)`},
		{[]string{"dlq", "lst", "x"}, `unknown command "lst" for "flowrun dlq" (did you mean ls?)`},
		{[]string{"types", "--log-level", "loud"}, `--log-level: slog: level string "loud": unknown name`},
		{[]string{"queue", "ls", "x", "--log-format", "xml"}, `--log-format must be text or json, not "xml"`},
		// Found by FuzzArgs: a flag error without a known phrase exited 1.
		{[]string{"queue", "ls", "x", "---"}, "bad flag syntax: ---"},
		{[]string{"state", "scan", "x", "f", "t", "--start", "a", "--start-base64", "YQ=="}, "give --start or --start-base64, not both"},
		{[]string{"state", "scan", "x", "f", "t", "--start-base64", "a b"}, "--start-base64: illegal base64"},
		// A negative N was read as a flag: "unknown shorthand flag: '1' in -1".
		{[]string{"scale", "x", "f", "-1"}, `N must be a number >= 1, not "-1"`},
		{[]string{"scale", "x", "f", "-20", "--json"}, `N must be a number >= 1, not "-20"`},
	} {
		code, out := runCLI(t, append(tc.args, "--data", data)...)
		if code != ExitUsage || !strings.Contains(out, tc.want) {
			t.Errorf("flowrun %s: exit %d, want %d and %q\n%s", strings.Join(tc.args, " "), code, ExitUsage, tc.want, out)
		}
	}
}

// run --json refuses an app with a stdout_sink before it runs: the status
// JSON went to the stdout the sink writes its events to.
func TestRunJSONWithStdoutSink(t *testing.T) {
	dir := t.TempDir()
	app := writeApp(t, dir, "app.yaml", `app: printing
flowlets:
  gen: {type: generator, config: {count: 3}}
  out: {type: stdout_sink}
connections:
  - {from: gen, to: out}
`)
	code, out := runCLI(t, "run", "--drain", "--json", "--progress", "never", "--http", "off", "--data", filepath.Join(dir, "data"), app)
	if want := `flowlet "out" (stdout_sink)`; code != ExitUsage || !strings.Contains(out, want) || strings.Contains(out, `"app"`) {
		t.Fatalf("run --json with a stdout_sink: exit %d, want %d and %q\n%s", code, ExitUsage, want, out)
	}
}

// --from/--to take an id as printed or a bare write pointer; --since/--until
// a time or a duration ago.
func TestTailSelectionFlags(t *testing.T) {
	for v, want := range map[string]uint64{"": 0, "1042": 1042, "3/0/1042.0.7": 1042} {
		if got, err := entryPointer("from", v, runtime.ParsePointer); err != nil || got != want {
			t.Errorf("entryPointer(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	// --to 0 selects nothing, but To 0 means no bound: it listed everything.
	if got, err := entryPointer("to", "0", runtime.ParseUpperPointer); err == nil || !strings.Contains(err.Error(), "--to:") {
		t.Errorf("entryPointer(to, 0) = %d, %v; want an error naming --to", got, err)
	}
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Time{"": {}, "10m": now.Add(-10 * time.Minute), "2026-11-21T09:00:00Z": now.Add(-time.Hour)} {
		if got, err := instant("since", v, now); err != nil || !got.Equal(want) {
			t.Errorf("instant(%q) = %v, %v; want %v", v, got, err, want)
		}
	}
}
