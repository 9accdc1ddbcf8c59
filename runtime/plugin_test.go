package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/cli"
	"github.com/flowrun/flowrun/runtime/cli/clitest"
)

// pluginCache is shared by the tests of this package (and between runs):
// a hit costs a `go list`, a miss a `go build`.
func pluginCache() string { return filepath.Join(os.TempDir(), "flowrun-plugin-test-cache") }

// relTo returns the path of a directory of this package relative to dir.
func relTo(t *testing.T, dir, target string) string {
	t.Helper()
	abs, err := filepath.Abs(target)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

const pluginApp = `
app: plugged
flowlets:
  gen:
    type: generator
    config: {count: %d, batch: 70, payload: "%s"}
  upper:
    plugin: %s
    instances: 2
    batch_size: 50
  sink:
    type: file_sink
    config: {path: out.txt}
connections:
  - {from: gen, to: upper, strategy: round_robin}
  - {from: upper, to: sink}
`

// TestPluginAppCLI runs an app with a plugin flowlet (given as a package
// directory relative to the app file) through the CLI: validate builds and
// describes it; run --drain runs it to the end, through a file sink;
// state and dlq see what it did.
func TestPluginAppCLI(t *testing.T) {
	dir := t.TempDir()
	appDir := filepath.Join(dir, "apps")
	os.Mkdir(appDir, 0o755)
	const n = 1000
	writeApp(t, appDir, fmt.Sprintf(pluginApp, n, "{mod:100} line {seq}", relTo(t, appDir, "testdata/upper")))
	cache := "--plugin-cache=" + pluginCache()
	if code, out, errs := runCLI(t, dir, cache, "validate", "apps/app.yaml"); code != cli.ExitOK || !strings.Contains(out, "ok") {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs := runCLI(t, dir, cache, "run", "--drain", "--no-sync", "--http", "off", "--progress", "never", "apps/app.yaml")
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(errs, "opening plugin") {
		t.Errorf("no log of the plugin opening:\n%s", errs)
	}
	clitest.ExpectLines(t, filepath.Join(dir, "out.txt"), n, func(i int) string { return fmt.Sprintf("%d LINE %d", i%100, i) })
	code, out, errs = runCLI(t, dir, "state", "get", "apps/app.yaml", "upper", "lines", "n", "--counters")
	if code != cli.ExitOK || strings.TrimSpace(out) != fmt.Sprint(n) {
		t.Errorf("state get upper n: exit %d, %q %s", code, out, errs)
	}
}

// TestPluginAppErrors: a plugin that does not build, one that fails the
// handshake and one without the output the app connects are errors of
// validate and run, naming the flowlet, with its position in the file.
func TestPluginAppErrors(t *testing.T) {
	dir := t.TempDir()
	cache := "--plugin-cache=" + pluginCache()
	cases := []struct {
		name, plugin, output string
		want                 []string
	}{
		{"build", "../internal/pluginhost/testdata/broken", "out", []string{`flowlet "upper"`, "building plugin", "undefined: undefinedFunction"}},
		{"handshake", "../internal/pluginhost/testdata/badversion", "out", []string{`flowlet "upper"`, "handshake failed", "protocol version"}},
		{"missing", "no/such/dir", "out", []string{`flowlet "upper"`, "no such file"}},
		{"output", "testdata/upper", "other", []string{`flowlet "upper"`, `has no output "other"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub := filepath.Join(dir, c.name)
			os.Mkdir(sub, 0o755)
			app := fmt.Sprintf(pluginApp, 10, "x {seq}", relTo(t, sub, c.plugin))
			app = strings.Replace(app, "{from: upper, to: sink}", "{from: upper."+c.output+", to: sink}", 1)
			writeApp(t, sub, app)
			for _, cmd := range []string{"validate", "run"} {
				args := []string{cache, cmd, "app.yaml"}
				if cmd == "run" {
					args = append(args, "--drain", "--http", "off")
				}
				code, out, errs := runCLI(t, sub, args...)
				all := out + errs
				if code != cli.ExitFailure {
					t.Errorf("%s: exit %d, want %d\n%s", cmd, code, cli.ExitFailure, all)
				}
				for _, w := range append(c.want, "app.yaml:7:3:") {
					if !strings.Contains(all, w) {
						t.Errorf("%s: output lacks %q:\n%s", cmd, w, all)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(sub, ".flowrun")); err == nil {
				t.Errorf("the failed run created the data directory")
			}
		})
	}
}

// OpenContext with a cancelled context stops building or starting plugins
// and opens nothing (a Ctrl-C during a cold plugin build used to wait for the
// build, then start the app).
func TestOpenContextCancelledDuringPlugins(t *testing.T) {
	dir := t.TempDir()
	appDir := filepath.Join(dir, "apps")
	os.Mkdir(appDir, 0o755)
	p := plan(t, appDir, fmt.Sprintf(pluginApp, 10, "x {seq}", relTo(t, appDir, "testdata/upper")))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	data := filepath.Join(dir, "data")
	_, err := runtime.OpenContext(ctx, p, runtime.Options{DataDir: data, NoSync: true, PluginCacheDir: t.TempDir()})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("OpenContext with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the store was opened: %v", err)
	}
}
