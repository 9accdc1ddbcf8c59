package runtime

import (
	"log/slog"
	"testing"
	"time"
)

// The run's timeouts reach the plugin host: a plugin call is killed after
// half of the step timeout unless set, and the start timeout passes through.
func TestPluginOptionsTimeouts(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	o := Options{DataDir: t.TempDir(), StepTimeout: 4 * time.Minute, PluginStartTimeout: 90 * time.Second}
	o.withDefaults("x")
	po := o.pluginOptions("x", log)
	if po.CallTimeout != 2*time.Minute || po.StartTimeout != 90*time.Second {
		t.Errorf("call %v, start %v; want 2m (half the step timeout) and 1m30s", po.CallTimeout, po.StartTimeout)
	}
	o = Options{DataDir: t.TempDir(), PluginCallTimeout: 5 * time.Second}
	o.withDefaults("x")
	if po := o.pluginOptions("x", log); po.CallTimeout != 5*time.Second {
		t.Errorf("an explicit call timeout: %v, want 5s", po.CallTimeout)
	}
	o = Options{DataDir: t.TempDir()}
	o.withDefaults("x")
	if po := o.pluginOptions("x", log); po.CallTimeout != 30*time.Second || po.StartTimeout != 0 {
		t.Errorf("defaults: call %v (want 30s, half of 1m), start %v (want 0: the host's default)", po.CallTimeout, po.StartTimeout)
	}
}
