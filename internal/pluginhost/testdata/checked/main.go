// Command checked is a plugin flowlet for pluginhost's tests whose type
// implements flowlet.ConfigChecker and declares SingleInstance. Its config:
// position (a whole number >= 0, emitted before each payload),
// max_instances (CheckConfig refuses more instances), panic_check
// (CheckConfig panics).
package main

import (
	"fmt"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/plugin"
)

type checked struct{ position int }

func (c *checked) CheckConfig(ic flowlet.InitContext) error {
	if p, _ := ic.Config.Bool("panic_check", false); p {
		panic("asked to panic in CheckConfig")
	}
	if err := ic.Config.Known("position", "max_instances", "panic_check"); err != nil {
		return err
	}
	if m, err := ic.Config.Int("max_instances", 0); err != nil {
		return err
	} else if m > 0 && ic.Instances > m {
		return fmt.Errorf("%d instances, at most %d", ic.Instances, m)
	}
	return c.Init(ic)
}

func (c *checked) Init(ic flowlet.InitContext) error {
	var err error
	if c.position, err = ic.Config.Int("position", 0); err != nil {
		return err
	}
	if c.position < 0 {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "position", Msg: fmt.Sprintf("must not be negative, got %d", c.position)}
	}
	return nil
}

func (c *checked) Process(ctx flowlet.Context, ev flowlet.Event) error {
	return ctx.Emit("out", fmt.Appendf(nil, "%d:%s", c.position, ev.Payload))
}

func main() {
	plugin.Serve(func() flowlet.Flowlet { return &checked{} },
		flowlet.TypeInfo{Outputs: []string{"out"}, SingleInstance: true, Doc: "checks its config"})
}
