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

const failHTTPApp = `
app: failhttp
flowlets:
  src: {type: http_source, retries: {max: 1, backoff: 1ms}, config: {addr: "127.0.0.1:0"}}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`

// runFailingHTTPStep runs http_source → t_take and fails every source step
// that holds event "x" with fault. While a step holds "gate", four requests
// come, "x" one of them; then one more once they are answered. It checks
// that every request but x's committed, each once, and returns the source
// steps' events, as they came to their commit, and x's answer.
func runFailingHTTPStep(t *testing.T, fault error, viaHTTP bool) ([][]string, ingestResult) {
	a := openYAML(t, failHTTPApp, Options{NoSync: true})
	gateHeld, release := make(chan struct{}), make(chan struct{})
	var steps [][]string
	onSrcCommit(a, func(sc *stepCtx, evs []string) error {
		steps = append(steps, evs)
		switch {
		case slices.Contains(evs, "gate"):
			close(gateHeld)
			<-release
		case slices.Contains(evs, "x"):
			return fmt.Errorf("%w (test)", fault)
		}
		return nil
	})
	run := startHTTPRun(t, a)
	defer run.cancel()
	ctx, ingest := run.ctx, run.ingest
	gate := ingest(false, "gate")
	select { // the source's step holds "gate": the next requests wait together
	case <-gateHeld:
	case r := <-gate:
		t.Fatalf("gate: %v", r.err)
	case err := <-run.done:
		t.Fatalf("run: %v", err)
	}
	others := []<-chan ingestResult{ingest(false, "a1", "a2"), ingest(false, "b1"), ingest(false, "c1", "c2", "c3")}
	failing := ingest(viaHTTP, "x")
	run.waitWaiting(t, len(others)+1)
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
	sinkCount := func() int64 { return countOf(t, a, "sink", "n", "ok") }
	const want = 8 // all but x
	for n := sinkCount(); n < want && ctx.Err() == nil && !t.Failed(); n = sinkCount() {
		time.Sleep(time.Millisecond)
	}
	run.stop(t)
	if n := sinkCount(); n != want {
		t.Errorf("sink counted %d events, want %d", n, want)
	}
	return steps, x
}

// httpRun is a run of an app with an http_source "src".
type httpRun struct {
	a      *App
	ctx    context.Context // the run's
	cancel context.CancelFunc
	done   chan error // Run's error
	src    *builtin.HTTPSource
}

// startHTTPRun runs a (a minute at most: a hang detector) and returns once
// it is ready.
func startHTTPRun(t *testing.T, a *App) *httpRun {
	t.Helper()
	r := &httpRun{a: a, done: make(chan error, 1)}
	r.ctx, r.cancel = context.WithTimeout(context.Background(), time.Minute)
	go func() { r.done <- a.Run(r.ctx) }()
	for ok, _ := a.Ready(); !ok; ok, _ = a.Ready() {
		if r.ctx.Err() != nil {
			t.Fatal("the app did not start")
		}
		time.Sleep(time.Millisecond)
	}
	r.src = a.byName["src"].insts[0].f.(*builtin.HTTPSource)
	return r
}

// ingest sends payloads to src in one request: to its endpoint if http,
// else through App.Ingest.
func (r *httpRun) ingest(http bool, payloads ...string) <-chan ingestResult {
	res := make(chan ingestResult, 1)
	evs := make([]IngestEvent, len(payloads))
	for i, p := range payloads {
		evs[i].Payload = []byte(p)
	}
	go func() {
		if !http {
			_, err := r.a.Ingest(r.ctx, "src", "", evs)
			res <- ingestResult{err: err}
			return
		}
		resp, err := postText(r.ctx, "http://"+r.src.Addr()+"/", strings.Join(payloads, "\n"))
		res <- ingestResult{err: err, status: resp.status, body: resp.body}
	}()
	return res
}

// waitWaiting waits until n requests wait for a step of src.
func (r *httpRun) waitWaiting(t *testing.T, n int) {
	t.Helper()
	for r.src.Waiting() < n {
		if r.ctx.Err() != nil {
			t.Fatal("the requests did not reach the source")
		}
		time.Sleep(time.Millisecond)
	}
}

// stop ends the run; its error fails t.
func (r *httpRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// onSrcCommit makes the commits of source src's steps fail with what f
// returns for the step and the payloads it emitted, in order.
func onSrcCommit(a *App, f func(sc *stepCtx, evs []string) error) {
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
		return f(sc, evs)
	}
}

// TestHTTPSourceDropHeldByBacklog: once a request is given up (DropStep),
// the source's next step waits for back-pressure (and a pause) as any step
// does. It was taken at once, in the same sourceStep: while the output
// queue held more than the source's max_backlog.
func TestHTTPSourceDropHeldByBacklog(t *testing.T) {
	a := openYAML(t, `
app: dropbacklog
flowlets:
  src: {type: http_source, retries: {max: 0}, config: {addr: "127.0.0.1:0", max_backlog: 1}}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true})
	if err := a.Pause("sink"); err != nil { // the backlog stays until the resume
		t.Fatal(err)
	}
	xHeld, release := make(chan struct{}), make(chan struct{})
	var overBound [][]string // src steps taken while the backlog was over the bound
	onSrcCommit(a, func(sc *stepCtx, evs []string) error {
		if a.outBacklog(sc.in.fl) > sc.in.frt.maxBacklog {
			overBound = append(overBound, evs)
		}
		if slices.Contains(evs, "x") {
			close(xHeld)
			<-release
			return fmt.Errorf("%w (test)", tx.ErrNotInProgress)
		}
		return nil
	})
	run := startHTTPRun(t, a)
	defer run.cancel()
	ingest := func(payload string) <-chan ingestResult { return run.ingest(false, payload) }
	x := ingest("x")
	select {
	case <-xHeld:
	case r := <-x:
		t.Fatalf("x: %v", r.err)
	}
	// While x's step commits, the queue fills past the bound (another
	// producer: the API's ingest into it) and y comes.
	if _, err := a.Ingest(run.ctx, "sink", "", []IngestEvent{{Payload: []byte("q1")}, {Payload: []byte("q2")}}); err != nil {
		t.Fatal(err)
	}
	y := ingest("y")
	run.waitWaiting(t, 1)
	close(release)
	if r := <-x; !errors.Is(r.err, ErrNotCommitted) {
		t.Errorf("x: %v, want ErrNotCommitted", r.err)
	}
	if err := a.Resume("sink"); err != nil {
		t.Fatal(err)
	}
	if r := <-y; r.err != nil {
		t.Errorf("y: %v", r.err)
	}
	run.stop(t)
	if len(overBound) > 0 {
		t.Errorf("source steps taken while its output queue held more than max_backlog: %q", overBound)
	}
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

// A source step whose commit fails with the commit log (tx.ErrLogFailed)
// may have committed: its requests are answered so — 500 on the source's
// endpoint, ErrOutcomeUnknown through App.Ingest. They were answered as
// aborted, and at the stop that followed "not committed, send them again"
// (503, ErrNotRunning): a resend that may count them twice.
func TestHTTPSourceLogFailureOutcomeUnknown(t *testing.T) {
	for _, viaHTTP := range []bool{false, true} {
		a := openYAML(t, failHTTPApp, Options{NoSync: true})
		onSrcCommit(a, func(sc *stepCtx, evs []string) error {
			if slices.Contains(evs, "x") {
				return fmt.Errorf("%w (test)", tx.ErrLogFailed)
			}
			return nil
		})
		run := startHTTPRun(t, a)
		r := <-run.ingest(viaHTTP, "x")
		if err := <-run.done; !errors.Is(err, tx.ErrLogFailed) {
			t.Errorf("viaHTTP=%v: run ended with %v, want the log failure", viaHTTP, err)
		}
		run.cancel()
		switch {
		case viaHTTP && (r.status != http.StatusInternalServerError || !strings.Contains(r.body, "may or may not")):
			t.Errorf("endpoint: %d %s, want 500 saying the outcome is unknown", r.status, r.body)
		case !viaHTTP && !errors.Is(r.err, ErrOutcomeUnknown):
			t.Errorf("App.Ingest: %v, want ErrOutcomeUnknown", r.err)
		}
	}
}
