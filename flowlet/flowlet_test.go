package flowlet

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	c := NewConfig("reader", map[string]any{
		"path": "/tmp/x", "n": 5, "f": 2.0, "half": 2.5, "big": uint64(1 << 63),
		// 2^63 as a float (a plugin's JSON config decodes 9223372036854775808 so):
		// float64(math.MaxInt) rounds up to it, so a <= bound let it through.
		"fbig":  float64(1 << 63),
		"every": "250ms", "zero": 0, "bare": 10, "on": true, "list": []any{"a", "b"},
		"mixed": []any{"a", 1}, "null": nil,
		// What a quoted variable in a flow mapping gives: {count: "${N:100}"}.
		"sn": " 100", "sf": "2.5", "sb": "True", "sbig": "99999999999999999999",
		"shex": "0x1p4", "sinf": "inf", "inf": math.Inf(1), "long": strings.Repeat("x", 1000), "se": "-1.5e3",
	})
	if n, err := c.Int("sn", 0); err != nil || n != 100 {
		t.Fatal("an integer in a string:", n, err)
	}
	if f, err := c.Float("sf", 0); err != nil || f != 2.5 {
		t.Fatal("a number in a string:", f, err)
	}
	if f, err := c.Float("se", 0); err != nil || f != -1500 {
		t.Fatal("a number with an exponent in a string:", f, err)
	}
	if b, err := c.Bool("sb", false); err != nil || !b {
		t.Fatal("a boolean in a string:", b, err)
	}
	if s, err := c.String("sn", ""); err != nil || s != " 100" {
		t.Fatal("a string stays the string it was:", s, err)
	}
	if s, err := c.String("path", ""); err != nil || s != "/tmp/x" {
		t.Fatal(s, err)
	}
	if s, err := c.String("missing", "def"); err != nil || s != "def" {
		t.Fatal(s, err)
	}
	if s, err := c.String("null", "def"); err != nil || s != "def" {
		t.Fatal("null takes the default:", s, err)
	}
	if n, err := c.Int("n", 0); err != nil || n != 5 {
		t.Fatal(n, err)
	}
	if n, err := c.Int("f", 0); err != nil || n != 2 {
		t.Fatal(n, err)
	}
	if d, err := c.Duration("every", 0); err != nil || d != 250*time.Millisecond {
		t.Fatal(d, err)
	}
	if d, err := c.Duration("zero", time.Second); err != nil || d != 0 {
		t.Fatal(d, err)
	}
	if b, err := c.Bool("on", false); err != nil || !b {
		t.Fatal(b, err)
	}
	if l, err := c.Strings("list", nil); err != nil || strings.Join(l, ",") != "a,b" {
		t.Fatal(l, err)
	}
	if l, err := c.Strings("path", nil); err != nil || len(l) != 1 {
		t.Fatal(l, err)
	}
	if f, err := c.Float("n", 0); err != nil || f != 5 {
		t.Fatal(f, err)
	}
	errCases := []struct {
		err  error
		want string
	}{
		{second(c.String("n", "")), `flowlet "reader": config field "n": want a string, got the number 5`},
		{second(c.Int("half", 0)), `flowlet "reader": config field "half": want an integer, got the number 2.5`},
		{second(c.Int("path", 0)), `config field "path": want an integer, got the string "/tmp/x"`},
		{second(c.Int("big", 0)), `config field "big": integer 9223372036854775808 out of range`},
		{second(c.Int("fbig", 0)), `config field "fbig": integer 9.223372036854776e+18 out of range`},
		{second(c.Duration("bare", 0)), `config field "bare": want a duration like "500ms" or "1m", got the number 10: add a unit, e.g. "10s"`},
		{second(c.Duration("path", 0)), `want a duration like "500ms" or "1m", got "/tmp/x"`},
		{second(c.Bool("path", false)), `config field "path": want true or false, got the string "/tmp/x"`},
		{second(c.Strings("mixed", nil)), `config field "mixed": item 1: want a string, got the number 1`},
		{second(c.Float("on", 0)), `want a number, got the boolean true`},
		{second(c.Float("path", 0)), `want a number, got the string "/tmp/x"`},
		{second(c.Int("sf", 0)), `config field "sf": want an integer, got the string "2.5"`},
		{second(c.Int("sbig", 0)), `config field "sbig": integer out of range: the string "99999999999999999999"`},
		{second(c.Float("shex", 0)), `config field "shex": want a number, got the string "0x1p4"`},
		{second(c.Float("sinf", 0)), `config field "sinf": want a number, got the string "inf"`},
		{second(c.Float("inf", 0)), `config field "inf": want a finite number, got +Inf`},
		{second(c.Int("long", 0)), `config field "long": want an integer, got the string "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"… (1000 bytes)`},
		{c.Require("path", "addr"), `flowlet "reader": config field "addr": required but not set`},
		{NewConfig("x", map[string]any{"pth": 1}).Known("path"), `flowlet "x": config field "pth": unknown field; did you mean "path"? (known: path)`},
		{NewConfig("x", map[string]any{"zzz": 1}).Known("path"), `flowlet "x": config field "zzz": unknown field (known: path)`},
		{NewConfig("x", map[string]any{"b": 1, "a": 1}).Known("path"), `flowlet "x": config: unknown fields a, b (known: path)`},
	}
	for i, ec := range errCases {
		var ce *ConfigError
		if !errors.As(ec.err, &ce) {
			t.Errorf("%d: %v is not a *ConfigError", i, ec.err)
			continue
		}
		if !strings.Contains(ec.err.Error(), ec.want) {
			t.Errorf("%d: error %q\nwant it to contain %q", i, ec.err, ec.want)
		}
	}
	if n, err := c.Int("path", 7); err == nil || n != 7 {
		t.Fatal("a bad value returns the default with the error:", n)
	}
	if err := NewConfig("x", nil).Known("a"); err != nil {
		t.Fatal(err)
	}
}

func second[T any](_ T, err error) error { return err }

type proc struct{}

func (proc) Process(Context, Event) error { return nil }

type src struct{}

func (src) Generate(Context) error { return nil }

type ticker struct{}

func (ticker) Tick(Context) error { return nil }

func TestRegistry(t *testing.T) {
	Register("test-proc", func() Flowlet { return proc{} }, TypeInfo{Outputs: []string{"out"}, Doc: "x"})
	Register("test-src", func() Flowlet { return src{} }, TypeInfo{Source: true})
	defer unregister("test-proc")
	defer unregister("test-src")
	typ, ok := Lookup("test-proc")
	if !ok || typ.Name != "test-proc" || typ.Info.Outputs[0] != "out" {
		t.Fatalf("Lookup: %+v %v", typ, ok)
	}
	typ.Info.Outputs[0] = "mutated"
	if typ, _ := Lookup("test-proc"); typ.Info.Outputs[0] != "out" {
		t.Fatal("Lookup shares Outputs with the registry")
	}
	if _, ok := Lookup("nope"); ok {
		t.Fatal("Lookup of an unknown type")
	}
	var names []string
	for _, typ := range Types() {
		names = append(names, typ.Name)
	}
	if got := strings.Join(names, ","); !strings.Contains(got, "test-proc,test-src") {
		t.Fatalf("Types: %s", got)
	}
	for name, f := range map[string]func(){
		"duplicate": func() { Register("test-proc", func() Flowlet { return proc{} }, TypeInfo{}) },
		"bad name":  func() { Register("Bad.Name", func() Flowlet { return proc{} }, TypeInfo{}) },
		"nil":       func() { Register("test-nil", nil, TypeInfo{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		f    Flowlet
		info TypeInfo
		ok   bool
	}{
		{proc{}, TypeInfo{}, true},
		{src{}, TypeInfo{Source: true}, true},
		{ticker{}, TypeInfo{Source: true}, true},
		{ticker{}, TypeInfo{}, true},
		{src{}, TypeInfo{}, false},
		{proc{}, TypeInfo{Source: true}, false},
		{struct{}{}, TypeInfo{}, false},
		{nil, TypeInfo{}, false},
	}
	for i, c := range cases {
		if err := Check(c.f, c.info); (err == nil) != c.ok {
			t.Errorf("%d: Check(%T, %+v) = %v", i, c.f, c.info, err)
		}
	}
}

func TestEmitOptions(t *testing.T) {
	at := time.Unix(100, 0)
	o := ResolveEmitOptions([]EmitOption{Key("path", "/a"), Key("ip", "1"), Key("path", "/b"), EventTime(at), TraceID("t1"), Priority(3)})
	if v, _ := o.Key("path"); v != "/b" || len(o.Keys) != 2 || !o.EventTime.Equal(at) || o.TraceID != "t1" || o.Priority != 3 {
		t.Fatalf("%+v", o)
	}
	if _, ok := o.Key("nope"); ok {
		t.Fatal("unset key found")
	}
	ev := Event{Keys: o.Keys}
	if v, ok := ev.Key("ip"); !ok || v != "1" {
		t.Fatal(v, ok)
	}
	// Resolve reuses Keys' capacity and replaces everything o held.
	keys := &o.Keys[0]
	o.Resolve([]EmitOption{Key("x", "1"), Key("x", "2")})
	if v, _ := o.Key("x"); v != "2" || len(o.Keys) != 1 || &o.Keys[0] != keys || !o.EventTime.IsZero() || o.TraceID != "" || o.Priority != 0 {
		t.Fatalf("%+v", o)
	}
	if _, ok := o.Key("path"); ok {
		t.Fatal("a key of the previous Resolve survived")
	}
	if n := testing.AllocsPerRun(100, func() { o.Resolve([]EmitOption{Key("a", "1"), Key("b", "2"), TraceID("t")}) }); n != 0 {
		t.Errorf("Resolve into an EmitOptions with room for the keys: %v allocations, want 0", n)
	}
	o.Resolve(nil)
	if len(o.Keys) != 0 || o.TraceID != "" {
		t.Fatalf("%+v", o)
	}
	so := ScanOptions{Prefix: []byte("a"), Start: []byte("ab"), End: []byte("ad")}
	for k, want := range map[string]bool{"a": false, "ab": true, "ac1": true, "ad": false, "b": false} {
		if so.Match([]byte(k)) != want {
			t.Errorf("Match(%q) != %v", k, want)
		}
	}
}

func TestPermanent(t *testing.T) {
	base := errors.New("bad record")
	if Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	p := Permanent(base)
	if !IsPermanent(p) || p.Error() != "bad record" || !errors.Is(p, base) {
		t.Errorf("Permanent(err): permanent %v, %q, is base %v", IsPermanent(p), p, errors.Is(p, base))
	}
	if !IsPermanent(fmt.Errorf("step: %w", p)) {
		t.Error("a wrapped permanent error is not permanent")
	}
	if IsPermanent(base) || IsPermanent(nil) {
		t.Error("a plain error is permanent")
	}
	if !IsPermanent(selfPermanent{}) {
		t.Error("an error with Permanent() true is not permanent")
	}
}

type selfPermanent struct{}

func (selfPermanent) Error() string   { return "self" }
func (selfPermanent) Permanent() bool { return true }

// TestRegisterRefusesBadOutputs: a type's declared outputs name queues
// ("<flowlet>.<output>"), so they follow the app YAML's name rule and are
// not the runtime's own dlq and dlq-replay. Register took any: the planner
// then refused every connection from such an output, and the type's emits
// on it were dropped as unrouted.
func TestRegisterRefusesBadOutputs(t *testing.T) {
	for _, out := range []string{"", "Out", "a.b", "-x", "dlq", "dlq-replay", strings.Repeat("o", 64)} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), fmt.Sprintf("%q", out)) {
					t.Errorf("output %q: Register's panic %v, want one naming the output", out, r)
				}
			}()
			defer unregister("test-outputs")
			Register("test-outputs", func() Flowlet { return proc{} }, TypeInfo{Outputs: []string{"out", out}})
		}()
	}
	for _, out := range []string{"out", "dlq2", "x-dlq", strings.Repeat("o", 63)} {
		if err := CheckOutputName(out); err != nil {
			t.Errorf("output %q: %v", out, err)
		}
	}
}
