package planner

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{&Error{File: "app.yaml", Line: 3, Col: 7, Msg: "boom"}, "app.yaml:3:7: boom"},
		{&Error{File: "app.yaml", Line: 3, Msg: "boom"}, "app.yaml:3: boom"}, // yaml.v3 gives no column
		{&Error{File: "app.yaml", Msg: "boom"}, "app.yaml: boom"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestErrorsAs(t *testing.T) {
	_, err := Parse("app.yaml", []byte("app: BAD\nflowlets: {a: {type: nope}}\n"), testOptions())
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 2 {
		t.Fatalf("want an ErrorList of 2, got %v", err)
	}
	var first *Error
	if !errors.As(err, &first) || first != list[0] {
		t.Fatalf("errors.As(*Error) = %v, want the first error", first)
	}
	if first.File != "app.yaml" || first.Line != 1 || first.Col != 6 {
		t.Errorf("position %s:%d:%d, want app.yaml:1:6", first.File, first.Line, first.Col)
	}
	want := "app.yaml:1:6: invalid app name \"BAD\": must match [a-z0-9][a-z0-9_-]{0,62}\n" +
		"app.yaml:2:22: unknown flowlet type \"nope\" (known types: counter, file_source, filter, http_source, kv_sink, log_sink; for a type of your own, build a binary that registers it (runtime/cli.Main) or use plugin:)"
	if err.Error() != want {
		t.Errorf("got\n%s\nwant\n%s", err, want)
	}
}

func TestParseFile(t *testing.T) {
	if _, err := ParseFile("testdata/does-not-exist.yaml", testOptions()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
	path := filepath.Join(t.TempDir(), "app.yaml")
	if err := os.WriteFile(path, []byte("app: x\nflowlets: {a: {type: nope}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(path, testOptions())
	if err == nil || !strings.HasPrefix(err.Error(), path+":2:22: ") {
		t.Errorf("got %v, want an error positioned in %s", err, path)
	}
}

// Without Options.Types any type name is accepted and no output or
// source/sink rules apply; structure is still checked.
func TestNilTypesSkipsTypeChecks(t *testing.T) {
	src := "app: x\nflowlets:\n  a: {type: anything}\n  b: {type: file_source}\nconnections:\n  - {from: a.whatever, to: b}\n"
	plan, err := Parse("x.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if q := plan.Queue("a.whatever"); q == nil || q.Groups[0].Name != "b" {
		t.Errorf("queue a.whatever = %+v", q)
	}
	if _, err := Parse("x.yaml", []byte(src), testOptions()); err == nil {
		t.Error("with testTypes the same app must fail")
	}
}

func TestLookupEnvDefaultsToOS(t *testing.T) {
	t.Setenv("FLOWRUN_PLANNER_TEST_APP", "from-os")
	plan, err := Parse("x.yaml", []byte("app: ${FLOWRUN_PLANNER_TEST_APP}\nflowlets: {a: {type: t}}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.App != "from-os" {
		t.Errorf("app = %q, want from-os", plan.App)
	}
}

func TestInterpolate(t *testing.T) {
	env := map[string]string{"SET": "value", "EMPTY": ""}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	for _, tc := range []struct {
		in, want string
		problems int
	}{
		{"plain", "plain", 0},
		{"${SET}", "value", 0},
		{"a${SET}b${SET}c", "avaluebvaluec", 0},
		{"${UNSET:def}", "def", 0},
		{"${UNSET:}", "", 0},
		{"${UNSET:a:b}", "a:b", 0},
		{"${EMPTY:def}", "", 0}, // set but empty: the default does not apply
		{"$${SET}", "${SET}", 0},
		{"$$${SET}", "$${SET}", 0}, // a lone "$", then the escape $${
		{"$SET $ $$ {SET}", "$SET $ $$ {SET}", 0},
		{"${UNSET}", "", 1},
		{"${UNSET} ${ALSO_UNSET}", "", 2},
		{"${SET", "", 1},
		{"${}", "", 1},
		{"${9X}", "", 1},
		{"${A-B}", "", 1},
		{"${UNSET:${SET}}", "", 1},
	} {
		budget := maxInterpolated
		got, problems := interpolate(tc.in, lookup, &budget)
		if len(problems) != tc.problems || tc.problems == 0 && got != tc.want {
			t.Errorf("interpolate(%q) = %q, %q; want %q with %d problems", tc.in, got, problems, tc.want, tc.problems)
		}
	}
}

// Interpolated plain scalars are typed as if written in the file; quoted
// ones stay strings.
func TestInterpolatedScalarTypes(t *testing.T) {
	opts := Options{LookupEnv: func(name string) (string, bool) {
		return map[string]string{"N": "42", "B": "true", "F": "1.5"}[name], name != "UNSET"
	}}
	src := `app: x
flowlets:
  a:
    type: t
    config:            # block style: in a flow mapping, { and } end a plain scalar
      n: ${N}
      qn: "${N}"
      b: ${B}
      f: ${F}
      null: ${UNSET:}
      tagged: !!str ${N}
`
	plan, err := Parse("x.yaml", []byte(src), opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"n": 42, "qn": "42", "b": true, "f": 1.5, "null": nil, "tagged": "42"}
	if got := plan.Flowlets[0].Config; !reflect.DeepEqual(got, want) {
		t.Errorf("config = %#v, want %#v", got, want)
	}
}

// A config holds only the documented Go types, and only what JSON can carry
// (plugins and flowrun plan --json get it as JSON): a date is the text
// written, not a time.Time; a non-finite number is an error at the value.
func TestConfigValueTypes(t *testing.T) {
	src := `app: x
flowlets:
  a:
    type: t
    config: {day: 2024-01-31, at: 2001-12-14t21:59:43.10-05:00, tagged: !!timestamp 2024-02-01, f: 1e3}
`
	plan, err := Parse("x.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"day": "2024-01-31", "at": "2001-12-14t21:59:43.10-05:00", "tagged": "2024-02-01", "f": 1e3}
	if got := plan.Flowlets[0].Config; !reflect.DeepEqual(got, want) {
		t.Errorf("config = %#v, want %#v", got, want)
	}
	_, err = Parse("x.yaml", []byte("app: x\nflowlets: {a: {type: t, config: {n: .nan, l: [-.inf]}}}\n"), Options{})
	if got, want := fmt.Sprint(err), "x.yaml:2:37: config value \".nan\" is not a finite number, which JSON (the form plugins get a config in) cannot carry\n"+
		"x.yaml:2:47: config value \"-.inf\" is not a finite number, which JSON (the form plugins get a config in) cannot carry"; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestConfigIntegersBeyondInt64: an integer beyond int64 is a float64
// (specs/app-yaml.md) only when a float64 holds it exactly; one it would
// round (2^64-1 became 2^64) is an error at the value. Integers beyond
// uint64 were rounded the same way. One tagged !!float is a float, as
// written: it planned before, and does.
func TestConfigIntegersBeyondInt64(t *testing.T) {
	src := "app: x\nflowlets: {a: {type: t, config: {a: 9223372036854775808, b: 100000000000000000000, c: -9223372036854775808, d: 0x8000000000000000, e: 18446744073709551615.0, " +
		"f: !!float 123456789012345678901, g: !!float -9223372036854775809}}}\n"
	plan, err := Parse("x.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"a": 0x1p63, "b": 1e20, "c": math.MinInt64, "d": 0x1p63, "e": 0x1p64, "f": 123456789012345678901.0, "g": -0x1p63}
	if got := plan.Flowlets[0].Config; !reflect.DeepEqual(got, want) {
		t.Errorf("config = %#v, want %#v", got, want)
	}
	for _, v := range []string{"18446744073709551615", "9223372036854775809", "-9223372036854775809",
		"123456789012345678901", "0xFFFFFFFFFFFFFFFF", "1_000_000_000_000_000_000_001"} {
		_, err := Parse("x.yaml", []byte("app: x\nflowlets: {a: {type: t, config: {n: "+v+"}}}\n"), Options{})
		var list ErrorList
		if !errors.As(err, &list) || len(list) != 1 || list[0].Line != 2 || list[0].Col != 37 || !strings.Contains(list[0].Msg, v) {
			t.Errorf("config integer %s: %v, want one error at 2:37 naming it", v, err)
		}
	}
}

// Flowlets sharing a config through an alias get independent copies, so one
// flowlet's Init cannot change another's config.
func TestAliasedConfigIsCopied(t *testing.T) {
	plan, err := ParseFile("testdata/aliases.yaml", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	a, b := plan.Flowlet("ingest"), plan.Flowlet("mirror")
	a.Config["listen"] = "changed"
	a.Config["routes"].([]any)[0] = "changed"
	if b.Config["listen"] != ":8080" || b.Config["routes"].([]any)[0] != "/a" {
		t.Errorf("mirror's config changed with ingest's: %v", b.Config)
	}
}

func TestAliasBomb(t *testing.T) {
	src := `app: bomb
flowlets:
  a:
    type: t
    config:
      l0: &l0 [x, x, x, x, x, x, x, x, x, x]
      l1: &l1 [*l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0]
      l2: &l2 [*l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1]
      l3: &l3 [*l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2]
      l4: &l4 [*l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3]
      l5: &l5 [*l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4]
      l6: &l6 [*l5, *l5, *l5, *l5, *l5, *l5, *l5, *l5, *l5, *l5]
      l7: &l7 [*l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6]
      l8: &l8 [*l7, *l7, *l7, *l7, *l7, *l7, *l7, *l7, *l7, *l7]
`
	// The error says the expansion stopped at the bound (10^9 values
	// otherwise): the planner did not expand the whole bomb.
	_, err := Parse("bomb.yaml", []byte(src), Options{})
	if err == nil || !strings.Contains(err.Error(), "aliases expand to more than") {
		t.Errorf("got %v, want an alias expansion error", err)
	}
}

// Top-level keys starting with "x-" are ignored (Docker Compose's extension
// fields), so shared values can be anchored before any flowlet uses them;
// elsewhere an x- key is as unknown as any other.
func TestExtensionFields(t *testing.T) {
	src := `app: ext
x-defaults:
  retry: &retry {max: 7, backoff: 5ms}
  gen: &gen {count: 10}
flowlets:
  a: {type: counter, retries: *retry, config: *gen}
  b: {type: log_sink, retries: *retry, config: *gen}
connections:
  - {from: a, to: b}
`
	plan, err := Parse("ext.yaml", []byte(src), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		f := plan.Flowlet(name)
		if f.Retry.Max != 7 || f.Config["count"] != 10 {
			t.Errorf("flowlet %s: retries %+v, config %v", name, f.Retry, f.Config)
		}
	}
	_, err = Parse("ext.yaml", []byte("app: ext\nflowlets:\n  a: {type: counter, x-note: hi}\n"), testOptions())
	if err == nil || !strings.Contains(err.Error(), `ext.yaml:3:22: unknown field "x-note" in flowlet "a"`) {
		t.Errorf("x- key inside a flowlet: %v", err)
	}
	_, err = Parse("ext.yaml", []byte("app: ext\nflowlet: {}\n"), testOptions())
	if err == nil || !strings.Contains(err.Error(), `did you mean "flowlets"`) {
		t.Errorf("misspelt top-level field: %v", err)
	}
}

func TestPlanLookupsAndOrder(t *testing.T) {
	plan, err := ParseFile("testdata/weblog.yaml", testOptions())
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, plan)
	if plan.Flowlet("nope") != nil || plan.Queue("nope") != nil {
		t.Error("lookups of unknown names must return nil")
	}
	pages := plan.Queue("parser.pages")
	if pages == nil || len(pages.Groups) != 2 {
		t.Fatalf("parser.pages = %+v, want 2 groups", pages)
	}
	if g := pages.Groups[0]; g.Name != "pageviews" || g.Strategy != Hash || g.Key != "path" || g.Instances != 4 {
		t.Errorf("group = %+v", g)
	}
	store := plan.Flowlet("store")
	if !reflect.DeepEqual(store.Inputs, []string{"pageviews.out", "visitors.out"}) || store.Outputs != nil {
		t.Errorf("store inputs %v outputs %v", store.Inputs, store.Outputs)
	}
	if store.Retry != (RetryPolicy{Max: 10, Backoff: 10 * time.Millisecond, MaxBackoff: 30 * time.Second}) {
		t.Errorf("store retry = %+v", store.Retry)
	}
	if store.Pos != (Position{File: "testdata/weblog.yaml", Line: 42, Col: 3}) {
		t.Errorf("store pos = %v", store.Pos)
	}
}

func TestDidYouMean(t *testing.T) {
	fields := []string{"type", "plugin", "instances", "batch_size", "retries", "tick", "config"}
	for word, want := range map[string]string{
		"instance": "instances", "Instances": "instances", "batchsize": "batch_size",
		"tpye": "type", "plugn": "plugin", "colour": "", "x": "", "ticks": "tick",
	} {
		if got := closest(word, fields); got != want {
			t.Errorf("closest(%q) = %q, want %q", word, got, want)
		}
	}
}

// TestConfigStringsAreUTF8: a config string that is not UTF-8 text (a
// !!binary of other bytes, or a variable's value) is an error at the value,
// as JSON (the form plugins get a config in) cannot carry it: it became
// U+FFFD in a plugin while an in-process flowlet saw the bytes. !!binary of
// text stays the text.
func TestConfigStringsAreUTF8(t *testing.T) {
	lookup := func(name string) (string, bool) { return "a\xffb", name == "BYTES" }
	src := "app: x\nflowlets: {a: {type: t, config: {ok: !!binary aGk=, b: !!binary /w==, l: [x, !!binary gA==], e: '${BYTES}'}}}\n"
	_, err := Parse("x.yaml", []byte(src), Options{LookupEnv: lookup})
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("got %v, want errors", err)
	}
	var got []string
	for _, e := range list {
		got = append(got, fmt.Sprintf("%d:%d", e.Line, e.Col))
		if !strings.Contains(e.Msg, "not UTF-8") {
			t.Errorf("error %v does not say the value is not UTF-8", e)
		}
	}
	if want := []string{"2:56", "2:78", "2:97"}; !reflect.DeepEqual(got, want) {
		t.Errorf("errors at %v, want %v:\n%v", got, want, err)
	}
	plan, err := Parse("x.yaml", []byte("app: x\nflowlets: {a: {type: t, config: {ok: !!binary aGk=}}}\n"), Options{})
	if err != nil || plan.Flowlets[0].Config["ok"] != "hi" {
		t.Errorf("!!binary of text: %v, %v; want \"hi\"", err, plan)
	}
}

// TestSuggestionsBounded: each unknown flowlet in a connection was compared
// with every flowlet's name for its "did you mean", so a file of n flowlets
// and n misspelt references took n² edit distances (a 320 KB file, 12 s).
// The comparisons now have a budget: the first references get their hint,
// every one is still reported, and the work stays linear.
func TestSuggestionsBounded(t *testing.T) {
	const n = 2000
	var b strings.Builder
	b.WriteString("app: x\nflowlets:\n")
	for i := range n {
		fmt.Fprintf(&b, "  f%04d: {type: filter}\n", i)
	}
	b.WriteString("connections:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {from: f%04d, to: g%04d}\n", i, i)
	}
	_, err := Parse("x.yaml", []byte(b.String()), testOptions())
	var list ErrorList
	if !errors.As(err, &list) || len(list) != n {
		t.Fatalf("want %d errors, got %v", n, err)
	}
	hints := 0
	for _, e := range list {
		if strings.Contains(e.Msg, "did you mean") {
			hints++
		}
	}
	if !strings.Contains(list[0].Msg, `did you mean "f0000"?`) || hints > maxSuggestWork/n {
		t.Errorf("%d of %d errors have a hint, want the first and at most %d; first: %v", hints, n, maxSuggestWork/n, list[0])
	}
}

// TestLongCyclesElided: each cycle's error listed its whole path, so n
// connections closing cycles through a chain of n flowlets made O(n²) bytes
// of errors (a 240 KB file: 38 MB). A long path is now elided in the
// middle; a short one is still listed whole (testdata/bad_cycle.yaml).
func TestLongCyclesElided(t *testing.T) {
	const n = 1000
	var b strings.Builder
	b.WriteString("app: x\nflowlets:\n")
	for i := range n {
		fmt.Fprintf(&b, "  f%d: {type: filter}\n", i)
	}
	b.WriteString("connections:\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, "  - {from: f%d, to: f%d}\n", i, i+1)
		fmt.Fprintf(&b, "  - {from: f%d.back, to: f0}\n", i+1)
	}
	_, err := Parse("x.yaml", []byte(b.String()), testOptions())
	var list ErrorList
	if !errors.As(err, &list) || len(list) != n-1 {
		t.Fatalf("want %d errors, got %d", n-1, len(list))
	}
	last := list[len(list)-1].Msg
	if !strings.Contains(last, ": f0 -> f1 -> ") || !strings.Contains(last, fmt.Sprintf(" -> f%d -> f0;", n-1)) ||
		!strings.Contains(last, "more flowlets") {
		t.Errorf("the longest cycle's error does not name its ends and elide the rest: %.300s", last)
	}
	for _, e := range list {
		if len(e.Msg) > 600 {
			t.Fatalf("an error of %d bytes: %.300s…", len(e.Msg), e.Msg)
		}
	}
}

// TestSharedConfigCostsOnce: what one more flowlet sharing a large config
// through an alias costs is bounded by its own text. Past the alias budget
// each such flowlet still walked the shared config (twice: converting it
// to nothing, then looking for failed interpolations), and a flowlet
// defined as an alias of a whole definition (f: *def) converted its config
// outside the budget: a 105 KB file of 400 of them planned, allocating
// 4.5 GB for 20 million config values.
func TestSharedConfigCostsOnce(t *testing.T) {
	list := "[" + strings.Repeat("1, ", 20_000) + "1]"
	for name, tc := range map[string]struct{ anchor, flowlet string }{
		"config: *b": {"x-b: &b {l: " + list + "}", "{type: filter, config: *b}"},
		"f: *def":    {"x-def: &def {type: filter, config: {l: " + list + "}}", "*def"},
	} {
		parse := func(n int) (allocated uint64) {
			var b strings.Builder
			b.WriteString("app: x\n" + tc.anchor + "\nflowlets:\n")
			for i := range n {
				fmt.Fprintf(&b, "  f%d: %s\n", i, tc.flowlet)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Parse("x.yaml", []byte(b.String()), testOptions())
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), "config aliases expand to more than") {
				t.Errorf("%s, %d flowlets: %.200v; want the alias budget's error", name, n, err)
			}
			return after.TotalAlloc - before.TotalAlloc
		}
		const n = 20
		small, large := parse(n), parse(2*n)
		if per := (int64(large) - int64(small)) / n; per > 64<<10 {
			t.Errorf("%s: each flowlet past the budget allocates %d bytes, want at most 64 KiB", name, per)
		}
	}
}

// TestIntegerOutOfRange: an integer field beyond int said "must be an
// integer", which it is; it now says the value is out of range.
func TestIntegerOutOfRange(t *testing.T) {
	src := "app: x\nflowlets: {a: {type: t, instances: 99999999999999999999, batch_size: -99999999999999999999}}\nruntime: {max_backlog: 99999999999999999999}\n"
	_, err := Parse("x.yaml", []byte(src), Options{})
	want := "x.yaml:2:36: instances 99999999999999999999 is out of range\n" +
		"x.yaml:2:70: batch_size -99999999999999999999 is out of range\n" +
		"x.yaml:3:24: runtime.max_backlog 99999999999999999999 is out of range"
	if fmt.Sprint(err) != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}
