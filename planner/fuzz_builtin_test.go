package planner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
	_ "github.com/flowrun/flowrun/runtime/builtin"
)

// FuzzParseBuiltin is FuzzParse against the registered built-in types, as
// flowrun validate plans: their config checks run on whatever config the
// file holds. A check that panics is reported by the runtime as an error
// ("checking its config: panic…"), which is the type's bug: it fails here.
//
//	go test ./planner -run '^$' -fuzz FuzzParseBuiltin -fuzztime 1m
func FuzzParseBuiltin(f *testing.F) {
	files, _ := filepath.Glob("../examples/*/*.yaml")
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	for _, s := range []string{
		"app: x\nflowlets:\n  g: {type: generator, config: {count: 3, rate: 1e300, payload: '{mod:0}', keys: {k: '{seq}'}, batch: 5}}\n  s: {type: file_sink, config: {path: out}}\nconnections:\n  - {from: g, to: s}\n",
		"app: x\nflowlets:\n  h: {type: http_source, config: {listen: '127.0.0.1:0', path: /in, max_body_bytes: -1, max_backlog: x}}\n  s: {type: stdout_sink, config: {}}\nconnections:\n  - {from: h, to: s}\n",
		"app: x\nflowlets:\n  r: {type: file_source, config: {path: '', follow: yes, lines_per_step: 0}}\n  s: {type: stdout_sink}\nconnections:\n  - {from: r, to: s}\n",
		"app: x\nflowlets:\n  r: {type: stdin_source, config: [1]}\n  s: {type: file_sink, config: {path: [a]}}\nconnections:\n  - {from: r, to: s}\n",
	} {
		f.Add([]byte(s))
	}
	opts := planner.Options{Types: runtime.PlannerTypes()}
	f.Fuzz(func(t *testing.T, src []byte) {
		plan, err := planner.Parse("fuzz.yaml", src, opts)
		if err != nil {
			planner.CheckErrorList(t, err)
			if strings.Contains(err.Error(), "checking its config: panic") {
				t.Fatalf("a config check panicked:\n%v", err)
			}
			return
		}
		planner.CheckPlan(t, plan)
	})
}
