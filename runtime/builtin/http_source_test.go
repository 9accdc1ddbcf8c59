package builtin

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
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

// TestHTTPSourceSplitStep: after a step too large or too slow
// (runtime.StepSplitter), the next steps take half its requests, and after
// limitRestoreAfter commits twice as many again; a request that fails
// alone is answered its error (droppedError, permanent if it was) and
// taken no more.
func TestHTTPSourceSplitStep(t *testing.T) {
	s := &HTTPSource{}
	if err := flowlettest.New("web").Init(s, map[string]any{"addr": "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	add := func(n int) {
		for range n {
			s.pending = append(s.pending, &ingest{events: [][]byte{[]byte("e")}, done: make(chan error, 1)})
		}
	}
	step := func() int {
		t.Helper()
		if err := s.Generate(flowlettest.New("web")); err != nil {
			t.Fatal(err)
		}
		return len(s.inflight)
	}
	add(2)
	if n := step(); n != 2 {
		t.Fatalf("first step took %d requests, want 2", n)
	}
	s.Aborted()
	if !s.SplitStep() {
		t.Fatal("a step of 2 requests was not split")
	}
	add(18)
	for i := range limitRestoreAfter {
		if n := step(); n != 1 {
			t.Fatalf("step %d after the split took %d requests, want 1", i, n)
		}
		s.Committed()
	}
	if n := step(); n != 2 {
		t.Fatalf("after %d commits a step took %d requests, want 2 again", limitRestoreAfter, n)
	}
	s.Aborted()
	s.SplitStep()
	if n := step(); n != 1 {
		t.Fatalf("after the second split a step took %d requests, want 1", n)
	}
	failing := s.inflight[0]
	s.Aborted()
	if s.SplitStep() {
		t.Fatal("a step of one request was split")
	}
	waiting := s.Waiting()
	tooLarge := errors.New("too large")
	s.DropStep(flowlet.Permanent(tooLarge))
	var de *droppedError
	if err := <-failing.done; !errors.As(err, &de) || !errors.Is(err, tooLarge) || !flowlet.IsPermanent(err) {
		t.Errorf("the dropped request was answered %v, want a permanent droppedError", err)
	}
	if w := s.Waiting(); w != waiting-1 || slices.Contains(s.pending, failing) {
		t.Errorf("after the drop %d requests wait (%d before), the dropped one among them: %v", w, waiting, slices.Contains(s.pending, failing))
	}
}

// TestHTTPSourceRequestEventBound: a request of more than MaxRequestEvents
// lines is refused whole (413) before anything is taken; one of exactly
// that many is taken. There was no bound but max_body_bytes: 8 MiB of
// one-byte lines made 4 M events, refused only when their step was too
// large for one write.
func TestHTTPSourceRequestEventBound(t *testing.T) {
	s := &HTTPSource{}
	if err := flowlettest.New("web").Init(s, map[string]any{"addr": "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	post := func(lines int) (int, error) {
		body := bytes.Repeat([]byte("x\r\n\n"), lines) // empty lines are not events
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr()+"/", bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	type answer struct {
		status int
		err    error
	}
	over := make(chan answer, 1)
	go func() { code, err := post(MaxRequestEvents + 1); over <- answer{code, err} }()
	select {
	case a := <-over:
		if a.err != nil || a.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("%d events: %d %v, want 413", MaxRequestEvents+1, a.status, a.err)
		}
	case <-s.Ready():
		t.Fatalf("%d events taken (%d requests waiting for a step), want 413", MaxRequestEvents+1, s.Waiting())
	}
	go post(MaxRequestEvents) // answered when its step commits, or at Close
	<-s.Ready()               // taken: waiting for a step
	ctx := flowlettest.New("web")
	if err := ctx.Generate(s); err != nil {
		t.Fatal(err)
	}
	if got := len(ctx.Emits("out")); got != MaxRequestEvents {
		t.Fatalf("step emitted %d events, want %d", got, MaxRequestEvents)
	}
}
