package pluginhost_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
	"github.com/flowrun/flowrun/internal/pluginhost"
)

// TestCheckConfig: a plugin whose type implements flowlet.ConfigChecker
// checks a config through CheckConfig, without Init: a misspelled field
// and a bad value are *flowlet.ConfigErrors naming the field, an error
// without a field is about the config as a whole, the instance count
// reaches the checker, a panic is a StartError with the plugin's stderr.
// The process Open kept then serves the first instance. SingleInstance
// travels in Describe.
func TestCheckConfig(t *testing.T) {
	logs := &logBuf{}
	p := open(t, "avg", "checked", options(t, logs))
	if !p.Info().SingleInstance {
		t.Errorf("SingleInstance not described: %+v", p.Info())
	}
	ctx := context.Background()
	cases := []struct {
		config    map[string]any
		instances int
		field     string
		msg       string
	}{
		{map[string]any{"posion": 3}, 1, "posion", `flowlet "avg": config field "posion": unknown field; did you mean "position"? (known: max_instances, panic_check, position)`},
		{map[string]any{"position": -1}, 1, "position", `flowlet "avg": config field "position": must not be negative, got -1`},
		{map[string]any{"position": "x"}, 1, "position", `flowlet "avg": config field "position": want an integer, got the string "x"`},
		{map[string]any{"max_instances": 2}, 3, "", `flowlet "avg": config: 3 instances, at most 2`},
	}
	for _, c := range cases {
		err := p.CheckConfig(ctx, c.instances, c.config)
		var ce *flowlet.ConfigError
		if !errors.As(err, &ce) || ce.ConfigField() != c.field || !strings.HasPrefix(err.Error(), c.msg) {
			t.Errorf("CheckConfig(%v, %d) = %v (%T), want a ConfigError of field %q: %s", c.config, c.instances, err, err, c.field, c.msg)
		}
	}
	for _, cfg := range []map[string]any{nil, {"position": 2}, {"position": 2, "max_instances": 2}} {
		if err := p.CheckConfig(ctx, 2, cfg); err != nil {
			t.Errorf("CheckConfig(%v): %v", cfg, err)
		}
	}
	err := p.CheckConfig(ctx, 1, map[string]any{"panic_check": true})
	var se *pluginhost.StartError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "CheckConfig panicked: asked to panic in CheckConfig") {
		t.Errorf("a panicking CheckConfig: %v (%T)", err, err)
	}
	if !strings.Contains(logs.String(), "main.(*checked).CheckConfig") {
		t.Errorf("the panic's stack is not in the log:\n%s", logs.String())
	}
	// A process after the one killed by the panic serves both a check and
	// the instance.
	if err := p.CheckConfig(ctx, 1, map[string]any{"position": 7}); err != nil {
		t.Fatal(err)
	}
	f := p.New()
	fc := flowlettest.New("avg")
	if err := fc.Init(f, map[string]any{"position": 7}); err != nil {
		t.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()
	if err := fc.Process(f, ev("a"), ev("b")); err != nil {
		t.Fatal(err)
	}
	if got := fc.Emits("out"); !slices.Equal(got, []string{"7:a", "7:b"}) {
		t.Errorf("out %v", got)
	}
	// Init still refuses what CheckConfig would have (no plan-time check).
	err = flowlettest.New("avg").Init(p.New(), map[string]any{"position": -1})
	var ie *pluginhost.InitError
	if !errors.As(err, &ie) || ie.Flowlet != "avg" || err.Error() != `plugin init: flowlet "avg": config field "position": must not be negative, got -1` {
		t.Errorf("Init with a bad config: %v", err)
	}
}

// TestCheckConfigWithoutChecker: a plugin without CheckConfig (unary: no
// SDK, UNIMPLEMENTED) and one whose type has no ConfigChecker (the SDK
// answers ok) have nothing to check; the process stays for the instance.
func TestCheckConfigWithoutChecker(t *testing.T) {
	for _, name := range []string{"unary", "testplugin"} {
		t.Run(name, func(t *testing.T) {
			p := open(t, name, name, options(t, nil))
			if p.Info().SingleInstance {
				t.Errorf("SingleInstance set: %+v", p.Info())
			}
			if err := p.CheckConfig(context.Background(), 3, map[string]any{"anything": 1}); err != nil {
				t.Fatal(err)
			}
			f := p.New()
			fc := flowlettest.New(name)
			if err := fc.Init(f, nil); err != nil {
				t.Fatal(err)
			}
			defer f.(flowlet.Closer).Close()
			if err := fc.Process(f, ev("a")); err != nil {
				t.Fatal(err)
			}
			if got := fc.Emits("out"); !slices.Equal(got, []string{"A"}) {
				t.Errorf("out %v", got)
			}
		})
	}
}

// TestCheckConfigCancelled: a cancelled context ends a check (here before
// the process is asked) with the context's error.
func TestCheckConfigCancelled(t *testing.T) {
	p := open(t, "avg", "checked", options(t, nil))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.CheckConfig(ctx, 1, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}
