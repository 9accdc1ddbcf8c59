package builtin

import (
	"errors"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// TestHTTPSourceAddrNeedsHost: an http_source address without a host
// (":8080") listens on every interface, with no token to guard the
// endpoint; it was taken as is. It is refused now, as the runtime's own
// HTTP address is (planner.CheckListenAddr): every interface only when
// written out (0.0.0.0:8080).
func TestHTTPSourceAddrNeedsHost(t *testing.T) {
	for addr, ok := range map[string]bool{":0": false, "0": false, "127.0.0.1:0": true, "localhost:0": true, "0.0.0.0:0": true, "[::1]:0": true} {
		s := &HTTPSource{}
		err := s.CheckConfig(flowlet.InitContext{Name: "web", Config: flowlet.NewConfig("web", map[string]any{"addr": addr})})
		var ce *flowlet.ConfigError
		switch {
		case ok && err != nil:
			t.Errorf("addr %q: %v", addr, err)
		case !ok && !errors.As(err, &ce):
			t.Errorf("addr %q: %v, want a ConfigError", addr, err)
		}
	}
	ctx := flowlettest.New("web")
	if err := ctx.Init(&HTTPSource{}, map[string]any{"addr": ":0"}); err == nil {
		t.Error("Init listened on every interface for an address without a host")
	}
}
