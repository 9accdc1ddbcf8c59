package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime/builtin"
	"github.com/flowrun/flowrun/tx"
)

// TestHTTPSourceStepFailsAlone: an http_source step whose commit fails for
// its time (past step_timeout) or its size (too large for one atomic write)
// because of one request is redone with half its requests, down to that
// request alone, which is then given up — after its retries if slow, at
// once if too large — and answered an error of its own (its endpoint: 503
// or 413; App.Ingest: the error, ErrBadRequest if too large); the requests
// beside it commit and the source goes on. The step of all of them failed
// its retries and the source stopped: every request was refused, and so was
// every later one.
func TestHTTPSourceStepFailsAlone(t *testing.T) {
	for _, c := range []struct {
		name       string
		fault      error
		viaHTTP    bool
		attempts   int // steps of the failing request alone
		wantStatus int
		wantErr    error // through App.Ingest; nil: not ErrBadRequest
	}{
		{"slow/endpoint", tx.ErrNotInProgress, true, 2, http.StatusServiceUnavailable, nil},
		// ErrNotCommitted: the HTTP API's ingest answers 503, to send again
		// (an untyped error, it answered 500).
		{"slow/ingest", tx.ErrNotInProgress, false, 2, 0, ErrNotCommitted},
		{"too large/endpoint", tx.ErrTooLarge, true, 1, http.StatusRequestEntityTooLarge, nil},
		{"too large/ingest", tx.ErrTooLarge, false, 1, 0, ErrBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			steps, failed := runFailingHTTPStep(t, c.fault, c.viaHTTP)
			alone := 0
			for _, s := range steps {
				if slices.Equal(s, []string{"x"}) {
					alone++
				}
			}
			if alone != c.attempts {
				t.Errorf("steps of the failing request alone: %d, want %d (steps %q)", alone, c.attempts, steps)
			}
			if c.viaHTTP {
				if failed.status != c.wantStatus {
					t.Errorf("the failing request: %d %s, want %d", failed.status, failed.body, c.wantStatus)
				}
				return
			}
			err := failed.err
			switch {
			case err == nil || errors.Is(err, ErrSourceStopped) || errors.Is(err, ErrNotRunning):
				t.Errorf("the failing request: %v, want its own failure", err)
			case c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Errorf("the failing request: %v, want %v", err, c.wantErr)
			case c.wantErr == nil && errors.Is(err, ErrBadRequest):
				t.Errorf("the failing request: %v: not a bad request", err)
			}
		})
	}
}

type ingestResult struct {
	err    error  // App.Ingest's
	status int    // the endpoint's answer
	body   string // the endpoint's answer
}

// runFailingHTTPStep runs http_source → t_take and fails every source step
// that holds event "x" with fault. While a step holds "gate", four requests
// come, "x" one of them; then one more once they are answered. It checks
// that every request but x's committed, each once, and returns the source
// steps' events, as they came to their commit, and x's answer.
func runFailingHTTPStep(t *testing.T, fault error, viaHTTP bool) ([][]string, ingestResult) {
	a := openYAML(t, `
app: failhttp
flowlets:
  src: {type: http_source, retries: {max: 1, backoff: 1ms}, config: {addr: "127.0.0.1:0"}}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true})
	gateHeld, release := make(chan struct{}), make(chan struct{})
	var steps [][]string
	a.commitFault = func(sc *stepCtx) error {
		if sc.in.fl.Name != "src" {
			return nil
		}
		var evs []string
		for _, e := range sc.emits {
			_, p, err := decodeEnvelope(e.ev.Payload, nil)
			if err != nil {
				return err
			}
			evs = append(evs, string(p))
		}
		steps = append(steps, evs)
		switch {
		case slices.Contains(evs, "gate"):
			close(gateHeld)
			<-release
		case slices.Contains(evs, "x"):
			return fmt.Errorf("%w (test)", fault)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang detector
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for ok, _ := a.Ready(); !ok; ok, _ = a.Ready() {
		if ctx.Err() != nil {
			t.Fatal("the app did not start")
		}
		time.Sleep(time.Millisecond)
	}
	src := a.byName["src"].insts[0].f.(*builtin.HTTPSource)
	ingest := func(http bool, payloads ...string) <-chan ingestResult {
		res := make(chan ingestResult, 1)
		evs := make([]IngestEvent, len(payloads))
		for i, p := range payloads {
			evs[i].Payload = []byte(p)
		}
		go func() {
			if !http {
				_, err := a.Ingest(ctx, "src", "", evs)
				res <- ingestResult{err: err}
				return
			}
			resp, err := postText(ctx, "http://"+src.Addr()+"/", strings.Join(payloads, "\n"))
			res <- ingestResult{err: err, status: resp.status, body: resp.body}
		}()
		return res
	}
	gate := ingest(false, "gate")
	select { // the source's step holds "gate": the next requests wait together
	case <-gateHeld:
	case r := <-gate:
		t.Fatalf("gate: %v", r.err)
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	others := []<-chan ingestResult{ingest(false, "a1", "a2"), ingest(false, "b1"), ingest(false, "c1", "c2", "c3")}
	failing := ingest(viaHTTP, "x")
	for src.Waiting() < len(others)+1 {
		if ctx.Err() != nil {
			t.Fatal("the requests did not reach the source")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	for i, r := range append(others, gate) {
		if r := <-r; r.err != nil {
			t.Errorf("request %d: %v", i, r.err)
		}
	}
	x := <-failing
	if r := <-ingest(false, "after"); r.err != nil {
		t.Errorf("a request after the failing one: %v", r.err)
	}
	sinkCount := func() int64 {
		var n int64
		if err := a.View("sink", func(r StateReader) error {
			var err error
			n, err = r.Counters("n").Get([]byte("ok"))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const want = 8 // all but x
	for n := sinkCount(); n < want && ctx.Err() == nil && !t.Failed(); n = sinkCount() {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := sinkCount(); n != want {
		t.Errorf("sink counted %d events, want %d", n, want)
	}
	return steps, x
}

// postText posts body to url and returns the answer.
func postText(ctx context.Context, url, body string) (ingestResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return ingestResult{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ingestResult{}, err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, resp.Body)
	return ingestResult{status: resp.StatusCode, body: b.String()}, err
}
