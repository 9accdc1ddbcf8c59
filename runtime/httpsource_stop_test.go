package runtime_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestHTTPSourceGaveUpAnswers: a request to an http_source that stops after
// its retries (here: its events cannot be partitioned by the hash key its
// consumer needs) is answered 503 at once, while the app runs on; it was
// left waiting until the client gave up. A request after the stop is
// refused too, through App.Ingest as well (a 503 in the HTTP API).
func TestHTTPSourceGaveUpAnswers(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	a := runApp(t, plan(t, dir, `
app: t
flowlets:
  in: {type: http_source, retries: {max: 0}, config: {addr: "`+addr+`"}}
  c: {type: t_count}
connections:
  - {from: in, to: c, strategy: hash, key: user}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	// A hang deadline only: the answer is due as soon as the source stops.
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Post("http://"+addr+"/", "text/plain", strings.NewReader("x1\n"))
	if err != nil {
		t.Fatalf("POST to a source that gives up: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("POST to a source that gives up: %d, want 503", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = a.Ingest(ctx, "in", "", []runtime.IngestEvent{{Payload: []byte("x2")}})
	if !errors.Is(err, runtime.ErrNotRunning) || ctx.Err() != nil {
		t.Fatalf("Ingest to a stopped source: %v (ctx %v), want ErrNotRunning", err, ctx.Err())
	}
	if st := a.Status(); st.Flowlets[0].Name != "in" || st.Flowlets[0].Done != 1 {
		t.Errorf("status of the stopped source: %+v", st.Flowlets[0])
	}
}

// freeAddr is a loopback address free a moment ago, for an http_source.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// post posts body to an http_source at addr; the client's timeout is a hang
// deadline only: every answer here is due at once.
func post(t *testing.T, addr, body string) *http.Response {
	t.Helper()
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Post("http://"+addr+"/", "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %q: %v", body, err)
	}
	resp.Body.Close()
	return resp
}

// TestHTTPSourcePausedAnswers503: an ingest into a paused http_source (its
// endpoint, App.Ingest) is refused at once — 503 with Retry-After,
// ErrPaused — as back-pressure; it waited, unanswered, until the resume (or
// App.Close). After the resume the source takes events again.
func TestHTTPSourcePausedAnswers503(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	a := runApp(t, plan(t, dir, `
app: t
flowlets:
  in: {type: http_source, config: {addr: "`+addr+`"}}
  c: {type: t_count}
connections:
  - {from: in, to: c}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if resp := post(t, addr, "a1\n"); resp.StatusCode != http.StatusOK {
		t.Fatalf("POST before the pause: %d", resp.StatusCode)
	}
	if err := a.Pause("in"); err != nil {
		t.Fatal(err)
	}
	resp := post(t, addr, "a2\n")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("POST to the paused source: %d, Retry-After %q; want 503, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := a.Ingest(ctx, "in", "", []runtime.IngestEvent{{Payload: []byte("a3")}})
	if !errors.Is(err, runtime.ErrPaused) || ctx.Err() != nil {
		t.Errorf("Ingest to the paused source: %v (ctx %v), want ErrPaused", err, ctx.Err())
	}
	if err := a.Resume("in"); err != nil {
		t.Fatal(err)
	}
	if resp := post(t, addr, "a4\n"); resp.StatusCode != http.StatusOK {
		t.Errorf("POST after the resume: %d, want 200", resp.StatusCode)
	}
}

// TestHTTPSourceStopAnswersWaiting: when the app begins to stop, the
// requests waiting for an http_source (here: held by back-pressure) are
// answered 503 at once. They were answered only at App.Close, after every
// step in flight had finished — here the consumer's, held by a gate until
// the answer came (up to step_timeout in real life).
func TestHTTPSourceStopAnswersWaiting(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	a, err := runtime.Open(plan(t, dir, `
app: t
flowlets:
  in: {type: http_source, config: {addr: "`+addr+`", max_backlog: 1}}
  blk: {type: t_block, batch_size: 1}
connections:
  - {from: in, to: blk}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	entered, open := theBlock.Hold(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			open()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
			a.Close()
		})
	}
	defer stop()
	// Two events committed: over max_backlog until blk consumed them, and
	// blk's first step is held.
	if resp := post(t, addr, "b1\nb2\n"); resp.StatusCode != http.StatusOK {
		t.Fatalf("first POST: %d", resp.StatusCode)
	}
	<-entered
	answered := make(chan int, 1)
	go func() {
		client := &http.Client{Timeout: time.Minute}
		resp, err := client.Post("http://"+addr+"/", "text/plain", strings.NewReader("b3\n"))
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	cancel() // the stop begins; blk's step stays in flight
	if code := <-answered; code != http.StatusServiceUnavailable {
		t.Errorf("request waiting while the app stops: %d, want 503 before the steps in flight finished (0: no answer)", code)
	}
	stop()
}
