package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/cli"
	"github.com/flowrun/flowrun/runtime/cli/clitest"
)

// checkedApp has the plugin flowlet avg at app.yaml:7:3.
const checkedApp = `
app: checked
flowlets:
  gen:
    type: generator
    config: {count: 20, payload: "x{seq}"}
  avg:
    plugin: %s
    instances: %d
    config: %s
  sink:
    type: file_sink
    config: {path: out.txt}
connections:
  - {from: gen, to: avg}
  - {from: avg, to: sink}
`

const checkedPlugin = "../internal/pluginhost/testdata/checked"

// TestPluginConfigCheck: a plugin whose type implements ConfigChecker (and
// declares SingleInstance) gets its config checked by validate and run, as
// a built-in type does: a misspelled field, a bad value and instances: 2
// fail both with exit 1 at the flowlet's file:line:col, naming the field
// once, and run creates no data directory; a good config runs.
func TestPluginConfigCheck(t *testing.T) {
	dir := t.TempDir()
	cache := "--plugin-cache=" + pluginCache()
	cases := []struct {
		name      string
		instances int
		config    string
		want      string
	}{
		{"misspelled", 1, "{posion: 3}", `app.yaml:7:3: flowlet "avg": config field "posion": unknown field; did you mean "position"? (known: max_instances, panic_check, position)`},
		{"value", 1, "{position: -1}", `app.yaml:7:3: flowlet "avg": config field "position": must not be negative, got -1`},
		{"instances", 3, "{max_instances: 2}", `app.yaml:7:3: flowlet "avg": plugin %s runs as a single instance (one reader, writer or listener); instances must be 1, got 3`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sub := filepath.Join(dir, c.name)
			os.Mkdir(sub, 0o755)
			rel := relTo(t, sub, checkedPlugin)
			writeApp(t, sub, fmt.Sprintf(checkedApp, rel, c.instances, c.config))
			want := strings.ReplaceAll(c.want, "%s", rel)
			for _, cmd := range []string{"validate", "run"} {
				args := []string{cache, cmd, "app.yaml"}
				if cmd == "run" {
					args = append(args, "--drain", "--http", "off")
				}
				code, out, errs := runCLI(t, sub, args...)
				all := out + errs
				if code != cli.ExitFailure || !strings.Contains(all, want) {
					t.Errorf("%s: exit %d, want %d and %q:\n%s", cmd, code, cli.ExitFailure, want, all)
				}
				if n := strings.Count(all, `flowlet "avg"`); n != 1 {
					t.Errorf("%s: the flowlet is named %d times:\n%s", cmd, n, all)
				}
			}
			if _, err := os.Stat(filepath.Join(sub, ".flowrun")); err == nil {
				t.Errorf("the failed run created the data directory")
			}
		})
	}
	t.Run("ok", func(t *testing.T) {
		sub := filepath.Join(dir, "ok")
		os.Mkdir(sub, 0o755)
		writeApp(t, sub, fmt.Sprintf(checkedApp, relTo(t, sub, checkedPlugin), 1, "{position: 5, max_instances: 1}"))
		if code, out, errs := runCLI(t, sub, cache, "validate", "app.yaml"); code != cli.ExitOK || !strings.Contains(out, "ok") {
			t.Fatalf("validate: exit %d\n%s%s", code, out, errs)
		}
		if code, out, errs := runCLI(t, sub, cache, "run", "--drain", "--no-sync", "--http", "off", "--progress", "never", "app.yaml"); code != cli.ExitOK {
			t.Fatalf("run: exit %d\n%s%s", code, out, errs)
		}
		clitest.ExpectLines(t, filepath.Join(sub, "out.txt"), 20, func(i int) string { return fmt.Sprintf("5:x%d", i) })
	})
}

// TestPluginConfigCheckAPI: CheckPlugins and OpenContext return the
// refused config as a planner.ErrorList at the flowlet's position, and
// OpenContext opens no store.
func TestPluginConfigCheckAPI(t *testing.T) {
	dir := t.TempDir()
	p := plan(t, dir, fmt.Sprintf(checkedApp, relTo(t, dir, checkedPlugin), 1, "{posion: 3}"))
	data := filepath.Join(dir, "data")
	opts := runtime.Options{DataDir: data, NoSync: true, PluginCacheDir: pluginCache()}
	for name, err := range map[string]error{
		"CheckPlugins": runtime.CheckPlugins(context.Background(), p, opts),
		"OpenContext": func() error {
			a, err := runtime.OpenContext(context.Background(), p, opts)
			if a != nil {
				a.Close()
			}
			return err
		}(),
	} {
		var el planner.ErrorList
		if !errors.As(err, &el) || len(el) != 1 {
			t.Fatalf("%s: %v (%T), want one planner error", name, err, err)
		}
		e := el[0]
		if e.Line != 7 || e.Col != 3 || e.Msg != `flowlet "avg": config field "posion": unknown field; did you mean "position"? (known: max_instances, panic_check, position)` {
			t.Errorf("%s: %+v", name, e)
		}
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the store was opened: %v", err)
	}
}

// TestPluginWithoutCheckConfig: a plugin without CheckConfig (written
// against the .proto without the SDK, as a plugin of an older SDK or in
// another language is: UNIMPLEMENTED) validates and runs, config unchecked,
// with several instances.
func TestPluginWithoutCheckConfig(t *testing.T) {
	dir := t.TempDir()
	writeApp(t, dir, fmt.Sprintf(checkedApp, relTo(t, dir, "../internal/pluginhost/testdata/unary"), 2, "{posion: 3}"))
	cache := "--plugin-cache=" + pluginCache()
	if code, out, errs := runCLI(t, dir, cache, "validate", "app.yaml"); code != cli.ExitOK || !strings.Contains(out, "ok") {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := runCLI(t, dir, cache, "run", "--drain", "--no-sync", "--http", "off", "--progress", "never", "app.yaml"); code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errs)
	}
	clitest.ExpectLines(t, filepath.Join(dir, "out.txt"), 20, func(i int) string { return fmt.Sprintf("X%d", i) })
}
