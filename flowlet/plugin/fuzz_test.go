package plugin

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/planner"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// FuzzDecodeConfig feeds DecodeConfig what a host could send as a config
// and every flowlet.Config getter each of its fields: none may panic, a
// getter's error is a *flowlet.ConfigError naming the field, and a value
// taken is the value sent.
//
//	go test ./flowlet/plugin -run '^$' -fuzz FuzzDecodeConfig -fuzztime 1m
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `[]`, `{"a": 1}`, `{"n": 9223372036854775807, "m": 9223372036854775808, "x": -9223372036854775809}`,
		`{"f": 1.5, "e": 1e400, "z": -0, "ne": -1e-400, "w": 3.0, "big": 18446744073709551616}`,
		`{"s": " 100", "d": "250ms", "b": "TRUE", "h": "0x1p4", "u": "1_000", "i": "inf", "l": ["a", 1, null], "m": {"x": [{}]}}`,
		`{"d": 0, "d2": 10, "d3": "-9223372036854775808ns", "d4": "1e3s"}`, `{"a": 1}{"b": 2}`, `{"a": "\ud800"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, js string) {
		m, err := DecodeConfig(js)
		if err != nil {
			return
		}
		if m == nil {
			t.Fatal("nil config without an error")
		}
		c := flowlet.NewConfig("f", m)
		for field, v := range m {
			checkGetters(t, c, field, v)
		}
		checkGetters(t, c, "absent", nil)
		_ = c.Known("a")
		_ = c.Require("a", "absent")
	})
}

func checkGetters(t *testing.T, c flowlet.Config, field string, v any) {
	t.Helper()
	checkErr := func(getter string, err error) {
		var ce *flowlet.ConfigError
		if err != nil && (!errors.As(err, &ce) || ce.Field != field || ce.Flowlet != "f") {
			t.Fatalf("%s(%q) of %#v: error %T %v, want a *ConfigError naming the field", getter, field, v, err, err)
		}
	}
	i, err := c.Int(field, 7)
	checkErr("Int", err)
	if x, ok := v.(float64); ok && err == nil && float64(i) != x {
		t.Fatalf("Int(%q) of %v = %d", field, x, i)
	}
	fl, err := c.Float(field, 7)
	checkErr("Float", err)
	if err == nil && (math.IsNaN(fl) || math.IsInf(fl, 0)) {
		t.Fatalf("Float(%q) of %#v = %v", field, v, fl)
	}
	_, err = c.String(field, "")
	checkErr("String", err)
	_, err = c.Bool(field, false)
	checkErr("Bool", err)
	_, err = c.Duration(field, 0)
	checkErr("Duration", err)
	_, err = c.Strings(field, nil)
	checkErr("Strings", err)
}

// FuzzUnpack unpacks any packed batch a host could send (its bytes): no
// panic; a batch taken has an event per payload end, each within the
// batch's buffers.
func FuzzUnpack(f *testing.F) {
	for _, p := range []*pb.PackedEvents{
		{},
		{Payloads: []byte("abc"), PayloadEnds: []uint32{1, 3}, Ids: []byte("i1i2"), IdEnds: []uint32{2, 4}, Inputs: []string{"a", "b"}, InputIndex: []uint32{0, 1},
			EventTimes: []int64{0, 5}, TraceIds: []string{"", "t"}, Keys: []*pb.EventKeys{{Event: 1, Keys: []*pb.KeyValue{{Name: "k", Value: "v"}}}}},
		{Payloads: []byte("a"), PayloadEnds: []uint32{2}, IdEnds: []uint32{0}, Inputs: []string{"a"}},
		{Payloads: []byte("a"), PayloadEnds: []uint32{1}, IdEnds: []uint32{0}, Inputs: []string{"a"}, Keys: []*pb.EventKeys{{Event: 1 << 31}}},
	} {
		b, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p pb.PackedEvents
		if proto.Unmarshal(b, &p) != nil {
			return
		}
		s := &server{}
		if err := s.unpack(&p); err != nil {
			return
		}
		if len(s.evs) != len(p.PayloadEnds) {
			t.Fatalf("%d events of %d payload ends", len(s.evs), len(p.PayloadEnds))
		}
		total := 0
		for _, e := range s.evs {
			total += len(e.Payload)
		}
		if total > len(p.Payloads) {
			t.Fatalf("%d payload bytes from a buffer of %d", total, len(p.Payloads))
		}
	})
}

// TestDecodeConfigNumbers: a config number is decoded as the planner
// makes it (specs/app-yaml.md): an integer beyond int64 is a float64 only
// when a float64 holds it exactly, else an error, as is a number beyond
// float64. 18446744073709551615 was rounded to 2^64 and 1e400 became +Inf.
func TestDecodeConfigNumbers(t *testing.T) {
	m, err := DecodeConfig(`{"a": 9223372036854775808, "b": -9223372036854775808, "c": 1.5, "d": [100000000000000000000], "e": 18446744073709551615.0}`)
	if err != nil {
		t.Fatal(err)
	}
	if m["a"] != 0x1p63 || m["b"] != math.MinInt64 || m["c"] != 1.5 || m["d"].([]any)[0] != 1e20 || m["e"] != 0x1p64 {
		t.Errorf("decoded %#v", m)
	}
	for _, js := range []string{`{"a": 18446744073709551615}`, `{"a": {"b": [-9223372036854775809]}}`, `{"a": 1e400}`, `{"a": -1E309}`} {
		if m, err := DecodeConfig(js); err == nil {
			t.Errorf("%s decoded as %#v, want an error", js, m)
		}
	}
}

// TestDecodeConfigFromPlanner: a config the planner takes reaches a plugin
// as the host sends it (pluginhost's configJSON: encoding/json, which
// writes a float64 in its shortest form, 2^63 as 9223372036854776000) and
// decodes to the planner's values. d5cbb74 refused such a float64 beyond
// int64 as an inexact integer: 9223372036854775808, which
// specs/app-yaml.md keeps as a float64, failed the plugin's Init.
func TestDecodeConfigFromPlanner(t *testing.T) {
	src := "app: x\nflowlets: {a: {type: t, config: {a: 9223372036854775808, b: 18446744073709551615.0, c: 1.2345678901234567e20, " +
		"d: [-9223372036854775809.0, 1e20, 99999999999999999999.5], e: 0x8000000000000000, f: 1e21, g: -9223372036854775808}}}\n"
	plan, err := planner.Parse("x.yaml", []byte(src), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := plan.Flowlets[0].Config
	js, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeConfig(string(js))
	if err != nil {
		t.Fatalf("DecodeConfig(%s): %v", js, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DecodeConfig(%s) = %#v, want the planner's %#v", js, got, want)
	}
}
