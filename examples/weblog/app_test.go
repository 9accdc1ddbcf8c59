package weblog_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/planner"
	_ "github.com/flowrun/flowrun/runtime/builtin"
	"github.com/flowrun/flowrun/runtime/cli"
)

// plannerTypes returns the registered flowlet types (the runtime's built-in
// ones and the weblog ones) as the planner wants them.
func plannerTypes() map[string]planner.TypeInfo {
	types := map[string]planner.TypeInfo{}
	for _, t := range flowlet.Types() {
		types[t.Name] = planner.TypeInfo{Outputs: t.Info.Outputs, Source: t.Info.Source, Sink: t.Info.Sink}
	}
	return types
}

func TestAppYAMLPlans(t *testing.T) {
	for _, file := range []string{"app.yaml", "app-builtin.yaml"} {
		t.Run(file, func(t *testing.T) { testAppYAMLPlans(t, file) })
	}
}

func testAppYAMLPlans(t *testing.T, file string) {
	env := map[string]string{}
	plan, err := planner.ParseFile(file, planner.Options{
		Types:     plannerTypes(),
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	if err != nil {
		t.Fatal(err)
	}
	reader := plan.Flowlet("reader")
	if reader == nil || reader.Config["path"] != "./access.log" {
		t.Fatalf("reader %+v", reader)
	}
	p := plan.Flowlet("parser")
	switch {
	case p == nil || p.Instances != 2:
		t.Fatalf("parser %+v", p)
	case file == "app.yaml" && p.Plugin != "../plugins/weblogparser":
		t.Fatalf("parser of app.yaml is not the plugin: %+v", p)
	case file != "app.yaml" && p.Type != flowlets.TypeParser:
		t.Fatalf("parser of %s is not the built-in type: %+v", file, p)
	}
	want := map[string]string{
		"reader.out":           "parser:round_robin",
		"parser.pages":         "page_views:hash(path)",
		"parser.visitors":      "unique_visitors:hash(ip)",
		"parser.status":        "status_counts:fifo",
		"parser.bytes":         "bytes_per_hour:fifo",
		"bytes_per_hour.hours": "hours_file:fifo",
	}
	if len(plan.Queues) != len(want) {
		t.Errorf("%d queues, want %d", len(plan.Queues), len(want))
	}
	for _, q := range plan.Queues {
		var gs []string
		for _, g := range q.Groups {
			s := g.Name + ":" + string(g.Strategy)
			if g.Key != "" {
				s = g.Name + ":hash(" + g.Key + ")"
			}
			gs = append(gs, s)
		}
		if got := strings.Join(gs, ","); got != want[q.Name] {
			t.Errorf("queue %s: groups %s, want %s", q.Name, got, want[q.Name])
		}
	}
	// The queue keys are the ones the parser sets.
	for q, k := range map[string]string{"parser.pages": flowlets.KeyPath, "parser.visitors": flowlets.KeyIP} {
		if plan.Queue(q).Key != k {
			t.Errorf("queue %s key %q, want %q", q, plan.Queue(q).Key, k)
		}
	}
	if bph := plan.Flowlet("bytes_per_hour"); bph.Tick == 0 {
		t.Error("bytes_per_hour has no tick")
	}

	// Every weblog flowlet accepts its config.
	for _, f := range plan.Flowlets {
		typ, ok := flowlet.Lookup(f.Type)
		if !ok || f.Type == "file_source" || f.Type == "file_sink" {
			continue // they open files
		}
		fl := typ.New()
		if in, ok := fl.(flowlet.Initializer); ok {
			err := in.Init(flowlet.InitContext{Name: f.Name, Instances: f.Instances, Config: flowlet.NewConfig(f.Name, f.Config)})
			if err != nil {
				t.Errorf("%s: Init: %v", f.Name, err)
			}
		}
	}

	env["WEBLOG_INPUT"] = "/data/x.log"
	plan, err = planner.ParseFile(file, planner.Options{
		Types:     plannerTypes(),
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := plan.Flowlet("reader").Config["path"]; p != "/data/x.log" {
		t.Errorf("WEBLOG_INPUT ignored: %v", p)
	}
}

// TestAppYAMLValidates runs `flowrun validate` (the weblog CLI's) on the
// apps; for app.yaml that builds and describes the parser plugin.
func TestAppYAMLValidates(t *testing.T) {
	cache := "--plugin-cache=" + filepath.Join(os.TempDir(), "flowrun-plugin-test-cache")
	for _, file := range []string{"app.yaml", "app-builtin.yaml"} {
		var out, errb bytes.Buffer
		if code := cli.Run([]string{cache, "validate", file}, nil, &out, &errb); code != 0 {
			t.Fatalf("validate %s: exit %d\n%s%s", file, code, out.String(), errb.String())
		}
	}
}
