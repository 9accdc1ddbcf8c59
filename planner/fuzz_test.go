package planner

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks that no input makes Parse panic or break its contract:
// either a valid Plan or a non-empty, sorted ErrorList.
//
//	go test ./planner -run '^$' -fuzz FuzzParse -fuzztime 1m
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	examples, _ := filepath.Glob("../examples/*/*.yaml")
	for _, file := range append(files, examples...) {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	for _, s := range []string{
		"", "---", "app: x\nflowlets: {a: {type: filter}}",
		"app: &a [*a]", "a: &a {b: *a}", "{flowlets: {a: {config: &c {x: *c}}}}",
		"app: ${", "app: $${X}", "\t", "- - -", "? [a]\n: b",
		"{app: x, flowlets: {a: {type: filter, config: {d: 2024-01-31, n: .nan}}}}",
		"{app: x, flowlets: {a: {type: filter, config: {u: 18446744073709551615, d: 2024-01-31}}}}",
		"{app: x, flowlets: {a: {type: filter, config: {b: !!binary /w==, t: !!binary aGk=}}}}",
		"{app: x, x-d: &d {type: filter, config: {l: &l [1, 2]}}, flowlets: {a: *d, b: *d, c: {type: filter, config: {m: *l}}}}",
		"app: x\nflowlets: {a: {type: t}, b: {type: t}, c: {type: t}}\nconnections: [{from: a, to: b}, {from: b, to: c}, {from: c.x, to: a}, {from: c, to: d}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		// With and without a type registry: the nil case skips type checks,
		// so it reaches plans the registry would reject.
		for _, opts := range []Options{testOptions(), {LookupEnv: testLookup}} {
			plan, err := Parse("fuzz.yaml", src, opts)
			if err != nil {
				checkErrorList(t, err)
				continue
			}
			checkPlan(t, plan)
		}
	})
}

func checkErrorList(t *testing.T, err error) {
	t.Helper()
	var list ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("error %T %v is not a non-empty ErrorList", err, err)
	}
	for i, e := range list {
		// Every error has file:line:col (specs/app-yaml.md), but a syntax
		// error's column, which yaml.v3 does not give.
		syntax := strings.HasPrefix(e.Msg, "invalid YAML: ")
		if e.File != "fuzz.yaml" || e.Msg == "" || e.Line < 1 || e.Col < 1 && !(syntax && e.Col == 0) {
			t.Fatalf("malformed error %#v", e)
		}
		if i > 0 && (list[i-1].Line > e.Line || list[i-1].Line == e.Line && list[i-1].Col > e.Col) {
			t.Fatalf("errors not sorted:\n%v", list)
		}
	}
	_ = list.Error()
}

// checkPlan verifies the invariants the rest of flowrun relies on.
func checkPlan(t *testing.T, plan *Plan) {
	t.Helper()
	if plan == nil {
		t.Fatal("nil plan without error")
	}
	if !nameRE.MatchString(plan.App) || len(plan.Flowlets) == 0 {
		t.Fatalf("bad app %q with %d flowlets", plan.App, len(plan.Flowlets))
	}
	rank := map[string]int{}
	for i, f := range plan.Flowlets {
		if !nameRE.MatchString(f.Name) || (f.Type == "") == (f.Plugin == "") ||
			f.Instances < 1 || f.Instances > MaxInstances || f.BatchSize < 1 || f.BatchSize > MaxBatchSize ||
			f.Retry.Max < 0 || f.Retry.Max > MaxRetries || f.Retry.Backoff <= 0 || f.Retry.Backoff > f.Retry.MaxBackoff || f.Tick < 0 || f.Config == nil {
			t.Fatalf("flowlet violates invariants: %+v", f)
		}
		rank[f.Name] = i
	}
	for _, c := range plan.Connections {
		if rank[c.From] >= rank[c.To] {
			t.Fatalf("connection %s -> %s against topological order", c.Queue(), c.To)
		}
		if (c.Strategy == Hash) != (c.Key != "") {
			t.Fatalf("connection %+v: key iff hash violated", c)
		}
	}
	groups := 0
	for _, q := range plan.Queues {
		if len(q.Groups) == 0 || q.Name != QueueName(q.Producer, q.Output) || q.Partitions < 0 || q.Partitions > MaxPartitions {
			t.Fatalf("bad queue %+v", q)
		}
		groups += len(q.Groups)
		for _, g := range q.Groups {
			if g.Strategy == Hash && g.Key != q.Key {
				t.Fatalf("queue %s key %q, group %s hashes by %q", q.Name, q.Key, g.Name, g.Key)
			}
		}
	}
	if groups != len(plan.Connections) {
		t.Fatalf("%d groups for %d connections", groups, len(plan.Connections))
	}
	for _, f := range plan.Flowlets {
		checkConfigValue(t, f.Config)
	}
	if _, err := json.Marshal(plan); err != nil {
		t.Fatalf("plan cannot be written as JSON: %v", err)
	}
	_ = plan.Text()
	_ = plan.DOT()
}

// checkConfigValue fails unless v holds only the Go types the spec lists.
func checkConfigValue(t *testing.T, v any) {
	t.Helper()
	switch v := v.(type) {
	case string:
		if !utf8.ValidString(v) {
			t.Fatalf("config string %q is not UTF-8", v)
		}
	case nil, int, float64, bool:
	case map[string]any:
		for _, x := range v {
			checkConfigValue(t, x)
		}
	case []any:
		for _, x := range v {
			checkConfigValue(t, x)
		}
	default:
		t.Fatalf("config value %v of type %T", v, v)
	}
}
