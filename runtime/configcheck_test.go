package runtime_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
)

// Planning an app checks every built-in flowlet's config (their
// flowlet.ConfigChecker) without side effects: each mistake is reported at
// its file:line:col, all at once, before a store or a file exists — no
// file_sink output is created, no port bound. A user review found these
// passing `flowrun validate` and failing only when the app started, one at
// a time and without a position.
func TestBuiltinConfigCheckedAtPlanning(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	path := writeApp(t, dir, `app: t
flowlets:
  g: {type: generator, config: {cont: 1000}}
  src:
    type: file_source
    config:
      follow: true
  h: {type: http_source, config: {split: words, max_backlog: -1}}
  out:
    type: file_sink
    instances: 2
    config: {path: `+out+`}
  o2: {type: stdout_sink, config: {foo: 1}}
  g2: {type: generator, config: {payload: "x{mod:0}", max_backlog: "${B:10}"}}
  g3: {type: generator, config: {rate: .inf}}
  h2: {type: http_source, config: {path: /a//b}}
  h3: {type: http_source, config: {max_body_bytes: 0}}
  out2: {type: file_sink, config: {path: ""}}
connections:
  - {from: g, to: out}
  - {from: src, to: out}
  - {from: h, to: o2}
  - {from: g2, to: o2}
  - {from: g3, to: o2}
  - {from: h2, to: o2}
  - {from: h3, to: o2}
  - {from: g3, to: out2}
`)
	_, err := runtime.ParseFile(path)
	var list planner.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("got %v, want a planner.ErrorList", err)
	}
	want := []string{
		`:3:33: flowlet "g": config field "cont": unknown field; did you mean "count"? (known: batch, count, keys, payload, rate)`,
		`:6:5: flowlet "src": config field "path": required but not set`,
		`:8:49: flowlet "h": config field "max_backlog": want a whole number >= 0 (0: no bound), not -1`,
		`:11:16: flowlet "out": type file_sink runs as a single instance`,
		`:13:36: flowlet "o2": config field "foo": unknown field (this flowlet takes no config)`,
		`:14:34: flowlet "g2": config field "payload": bad {mod:N} in "x{mod:0}"`,
		`:15:40: config value ".inf" is not a finite number`, // the planner's (since 4b9018c)
		`:16:36: flowlet "h2": config field "path": want a clean URL path`,
		`:17:36: flowlet "h3": config field "max_body_bytes": must be at least 1, got 0`,
		`:18:36: flowlet "out2": config field "path": must not be empty`,
	}
	if len(list) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(list), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(list[i].Error(), path+w) {
			t.Errorf("error %d:\n%s\nwant it to start with\n%s%s", i, list[i], path, w)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("planning touched the file_sink's output: %v", err)
	}
}

// tick on a type without Tick would do nothing: an error at planning.
func TestTickOnTypeWithoutTick(t *testing.T) {
	dir := t.TempDir()
	_, err := runtime.ParseFile(writeApp(t, dir, `app: t
flowlets:
  g: {type: generator, tick: 1s}
  o: {type: stdout_sink}
connections:
  - {from: g, to: o}
`))
	if err == nil || !strings.Contains(err.Error(), `:3:30: flowlet "g": type generator has no Tick, so tick would do nothing`) {
		t.Fatalf("got %v", err)
	}
}
