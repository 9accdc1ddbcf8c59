package plugin_test

import (
	"bytes"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/plugin"
)

// Upper upper-cases each event onto "out". It is an ordinary flowlet: the
// same value runs in process (flowlet.Register) or as a plugin, and
// flowlettest tests it either way.
type Upper struct{}

func (Upper) Process(ctx flowlet.Context, ev flowlet.Event) error {
	return ctx.Emit("out", bytes.ToUpper(ev.Payload))
}

// A plugin's main serves its type; the app YAML names the package's
// directory (built on demand) or the binary in `plugin:`. Serve is only run
// by the host, so this example is compiled, not run.
func ExampleServe() {
	plugin.Serve(func() flowlet.Flowlet { return Upper{} },
		flowlet.TypeInfo{Outputs: []string{"out"}, Doc: "upper-cases lines"})
}
