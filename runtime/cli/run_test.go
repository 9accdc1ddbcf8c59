package cli

import (
	"bytes"
	"os"
	"path/filepath"
	rtdebug "runtime/debug"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/planner"
)

// A flag given on the command line beats the app file's runtime section,
// which beats the flag's default; positions are kept only for values taken
// from the file.
func TestResolveRunSettings(t *testing.T) {
	pos := planner.Position{File: "app.yaml", Line: 3, Col: 9}
	file := planner.Runtime{
		HTTP:         &planner.Setting[string]{Value: "127.0.0.1:8080", Pos: pos},
		MemoryLimit:  &planner.Setting[string]{Value: "256MiB", Pos: pos},
		MaxBacklog:   &planner.Setting[int]{Value: -1, Pos: pos},
		NoSync:       &planner.Setting[bool]{Value: true, Pos: pos},
		DeferCommits: &planner.Setting[bool]{Value: true, Pos: pos},
		StepTimeout:  &planner.Setting[string]{Value: "5m", Pos: pos},

		PluginStartTimeout: &planner.Setting[string]{Value: "2m", Pos: pos},
	}
	defaults := runSettings{http: "127.0.0.1:0", memoryLimit: "auto", maxBacklog: 50000, stepTimeout: "1m", pluginStartTimeout: "30s"}
	none := func(string) bool { return false }

	rs := resolveRunSettings(none, planner.Runtime{}, defaults)
	if rs.http != "127.0.0.1:0" || rs.memoryLimit != "auto" || rs.maxBacklog != 50000 || rs.noSync || rs.httpPos != nil || len(rs.fromFile) != 0 {
		t.Errorf("no runtime section: %+v, want the defaults", rs)
	}
	rs = resolveRunSettings(none, file, defaults)
	if rs.http != "127.0.0.1:8080" || rs.memoryLimit != "256MiB" || rs.maxBacklog != -1 || !rs.noSync || !rs.deferCommits ||
		rs.stepTimeout != "5m" || rs.pluginStartTimeout != "2m" || rs.stepTimeoutPos == nil || rs.pluginStartTimeoutPos == nil ||
		rs.httpPos == nil || *rs.httpPos != pos || rs.memoryLimitPos == nil ||
		strings.Join(rs.fromFile, ",") != "http,memory_limit,max_backlog,no_sync,defer_commits,step_timeout,plugin_start_timeout" {
		t.Errorf("from the file: %+v", rs)
	}
	// Every flag given, with values equal to the defaults: the flags win.
	all := func(string) bool { return true }
	rs = resolveRunSettings(all, file, defaults)
	if rs.http != "127.0.0.1:0" || rs.memoryLimit != "auto" || rs.maxBacklog != 50000 || rs.noSync || rs.deferCommits || rs.httpPos != nil || rs.memoryLimitPos != nil || len(rs.fromFile) != 0 ||
		rs.stepTimeout != "1m" || rs.pluginStartTimeout != "30s" || rs.stepTimeoutPos != nil {
		t.Errorf("flags given: %+v, want the flags' values", rs)
	}
	// One flag given: only that one wins.
	rs = resolveRunSettings(func(f string) bool { return f == "no-sync" }, file, defaults)
	if rs.noSync || rs.http != "127.0.0.1:8080" || rs.maxBacklog != -1 {
		t.Errorf("--no-sync=false over no_sync: true: %+v", rs)
	}
}

// runCLI runs the CLI in process with a fresh memory limit afterwards.
func runCLI(t testing.TB, args ...string) (int, string) {
	t.Helper()
	prev := rtdebug.SetMemoryLimit(-1)
	defer rtdebug.SetMemoryLimit(prev)
	var out, errb bytes.Buffer
	code := Run(args, strings.NewReader(""), &out, &errb)
	return code, out.String() + errb.String()
}

// End to end: run --drain takes the memory limit and the HTTP address from
// the app file unless a flag says otherwise, and reports a bad address of
// the file at its position.
func TestRunSettingsFromFile(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("FLOWRUN_HTTP_TOKEN", "")
	dir := t.TempDir()
	app := func(runtimeSection string) string {
		p := filepath.Join(dir, "app.yaml")
		src := "app: pinned\nruntime:\n" + runtimeSection + `flowlets:
  gen: {type: generator, config: {count: 100}}
  out: {type: file_sink, config: {path: ` + filepath.Join(dir, "out.txt") + `}}
connections:
  - {from: gen, to: out}
`
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(file string, flags ...string) (int, string) {
		args := append([]string{"run", "--drain", "--progress", "never", "--no-sync", "--data", filepath.Join(dir, "data"), file}, flags...)
		return runCLI(t, args...)
	}

	file := app("  http: \"off\"\n  memory_limit: 300MiB\n  max_backlog: 10\n")
	code, out := run(file)
	if code != 0 || !strings.Contains(out, "limit_mib=300") || strings.Contains(out, "http server listening") ||
		!strings.Contains(out, `settings="http, memory_limit, max_backlog"`) {
		t.Fatalf("settings from the file: exit %d\n%s", code, out)
	}
	code, out = run(file, "--memory-limit", "400MiB", "--http", "127.0.0.1:0")
	if code != 0 || !strings.Contains(out, "limit_mib=400") || !strings.Contains(out, "http server listening") ||
		!strings.Contains(out, `settings=max_backlog`) {
		t.Fatalf("flags over the file: exit %d\n%s", code, out)
	}

	// Off loopback without a token: an error at the file's position (exit
	// 1); the same address as a flag is a bad command line (exit 2).
	file = app("  http: 0.0.0.0:0\n")
	code, out = run(file)
	if want := file + ":3:9: runtime.http: "; code != ExitFailure || !strings.Contains(out, want) || !strings.Contains(out, "token") {
		t.Fatalf("non-loopback http in the file without a token: exit %d, want 1 and %q\n%s", code, want, out)
	}
	code, out = run(file, "--http", "127.0.0.1:0")
	if code != 0 {
		t.Fatalf("--http over the file's address: exit %d\n%s", code, out)
	}
	// A short token is the token's mistake, named by where it came from
	// (it was blamed on the file's http field, or on --http).
	t.Setenv("FLOWRUN_HTTP_TOKEN", "short")
	code, out = run(file)
	if want := "$FLOWRUN_HTTP_TOKEN: want at least 8 characters"; code != ExitUsage || !strings.Contains(out, want) {
		t.Fatalf("a short token in the environment: exit %d, want 2 and %q\n%s", code, want, out)
	}
	t.Setenv("FLOWRUN_HTTP_TOKEN", "")
	code, out = run(app(""), "--http-token", "short")
	if want := "--http-token: want at least 8 characters"; code != ExitUsage || !strings.Contains(out, want) {
		t.Fatalf("a short --http-token: exit %d, want 2 and %q\n%s", code, want, out)
	}
	code, out = run(app(""), "--http", "0.0.0.0:0")
	if code != ExitUsage || !strings.Contains(out, "--http: ") {
		t.Fatalf("non-loopback --http without a token: exit %d, want 2\n%s", code, out)
	}

	// The planner's checks: an implicit every-interface address.
	code, out = run(app("  http: \":8080\"\n"))
	if code != ExitFailure || !strings.Contains(out, ":3:9: runtime.http: \":8080\" has no host") {
		t.Fatalf("implicit every-interface address: exit %d\n%s", code, out)
	}
	// The same rule for the flag, even with a token (it used to listen on
	// every interface).
	code, out = run(app(""), "--http", ":0", "--http-token", "secret")
	if code != ExitUsage || !strings.Contains(out, `--http: ":0" has no host`) {
		t.Fatalf("implicit every-interface --http: exit %d, want 2\n%s", code, out)
	}
	// Timeouts: the file's value is taken (and named in the log); a bad one
	// is the planner's error at its position; a bad flag is a usage error.
	code, out = run(app("  step_timeout: 2m\n  plugin_start_timeout: 45s\n"))
	if code != 0 || !strings.Contains(out, `settings="step_timeout, plugin_start_timeout"`) {
		t.Fatalf("timeouts from the file: exit %d\n%s", code, out)
	}
	code, out = run(app("  step_timeout: 0s\n"))
	if code != ExitFailure || !strings.Contains(out, `:3:17: runtime.step_timeout: "0s" is below the minimum of 1ms`) {
		t.Fatalf("step_timeout 0s in the file: exit %d\n%s", code, out)
	}
	code, out = run(app(""), "--plugin-start-timeout", "2h")
	if code != ExitUsage || !strings.Contains(out, `--plugin-start-timeout: "2h" is above the maximum of 1h`) {
		t.Fatalf("--plugin-start-timeout 2h: exit %d, want 2\n%s", code, out)
	}
	code, out = run(app(""), "--step-timeout", "soon")
	if code != ExitUsage || !strings.Contains(out, `--step-timeout: "soon" is not a duration`) {
		t.Fatalf("--step-timeout soon: exit %d, want 2\n%s", code, out)
	}
	if got := rtdebug.SetMemoryLimit(-1); got == 300<<20 || got == 400<<20 {
		t.Errorf("the test's memory limit leaked: %d", got)
	}
}
