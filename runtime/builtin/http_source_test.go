package builtin

import (
	"context"
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

// TestHTTPSourceRefuseIngest: RefuseIngest answers a request already
// waiting (not in a step) at once with its error, and later ones too, until
// RefuseIngest(nil); a refused step's requests (Aborted) are answered too.
func TestHTTPSourceRefuseIngest(t *testing.T) {
	s := &HTTPSource{}
	if err := flowlettest.New("web").Init(s, map[string]any{"addr": "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	refused := errors.New("refused")
	errc := make(chan error, 1)
	go func() { errc <- s.Ingest(context.Background(), [][]byte{[]byte("a")}) }()
	<-s.Ready() // waiting now
	s.RefuseIngest(refused)
	if err := <-errc; err != refused {
		t.Errorf("waiting request: %v, want the refusal", err)
	}
	if err := s.Ingest(context.Background(), [][]byte{[]byte("b")}); err != refused {
		t.Errorf("request while refused: %v, want the refusal", err)
	}

	// In a step when the refusal comes: that step aborts.
	s.RefuseIngest(nil)
	go func() { errc <- s.Ingest(context.Background(), [][]byte{[]byte("c")}) }()
	<-s.Ready()
	ctx := flowlettest.New("web")
	if err := s.Generate(ctx); err != nil {
		t.Fatal(err)
	}
	s.RefuseIngest(refused)
	s.Aborted()
	if err := <-errc; err != refused {
		t.Errorf("request of an aborted step while refused: %v, want the refusal", err)
	}
}
