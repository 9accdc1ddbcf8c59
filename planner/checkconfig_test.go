package planner

import (
	"errors"
	"fmt"
	"testing"
)

type fieldErr struct{ field, msg string }

func (e *fieldErr) Error() string       { return e.msg }
func (e *fieldErr) ConfigField() string { return e.field }

// A type's CheckConfig runs on every flowlet of that type, with the
// instance count and the interpolated config; its errors land on the config
// field they name (else on the config key), a SingleInstance type's extra
// instances on the instances field, and nothing is checked for a flowlet
// whose instances are already wrong or whose config holds a reported error
// (an unset variable: its raw text would draw a second, wrong message).
func TestCheckConfig(t *testing.T) {
	var calls []string
	types := map[string]TypeInfo{
		"sink": {Sink: true, SingleInstance: true},
		"src": {Source: true, CheckConfig: func(name string, instances int, cfg map[string]any) error {
			calls = append(calls, fmt.Sprintf("%s/%d/%v", name, instances, cfg["n"]))
			switch {
			case cfg["bad"] != nil:
				return &fieldErr{"bad", fmt.Sprintf("flowlet %q: bad is bad", name)}
			case cfg["whole"] != nil:
				return errors.New("the config as a whole is wrong")
			}
			return nil
		}},
	}
	src := `app: x
flowlets:
  ok: {type: src, instances: 3, config: {n: "${N:7}"}}
  a:
    type: src
    config:
      n: 1
      bad: true
  b: {type: src, config: {whole: 1}}
  c: {type: src, instances: 0, config: {bad: 1}}
  s: {type: sink, instances: 2}
  d: {type: src, config: {bad: "${NOPE}"}}
connections:
  - {from: ok, to: s}
  - {from: a, to: s}
  - {from: b, to: s}
  - {from: c, to: s}
  - {from: d, to: s}
`
	_, err := Parse("app.yaml", []byte(src), Options{Types: types, LookupEnv: func(string) (string, bool) { return "", false }})
	want := "app.yaml:8:7: flowlet \"a\": bad is bad\n" +
		"app.yaml:9:18: the config as a whole is wrong\n" +
		"app.yaml:10:29: instances must be between 1 and 1024, got 0\n" +
		"app.yaml:11:30: flowlet \"s\": type sink runs as a single instance (one reader, writer or listener); instances must be 1, got 2\n" +
		"app.yaml:12:32: environment variable NOPE is not set and ${NOPE} has no default (write ${NOPE:default})"
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	if got := fmt.Sprint(calls); got != "[ok/3/7 a/1/1 b/1/<nil>]" {
		t.Errorf("CheckConfig calls %s", got)
	}
}
