package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
	_ "github.com/flowrun/flowrun/runtime/builtin"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// api_count counts each payload (counter "n", and "total") and fails on
// payloads containing "bad".
type countFlowlet struct{}

func (countFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	if strings.Contains(string(ev.Payload), "bad") {
		return fmt.Errorf("refusing %q", ev.Payload)
	}
	if err := ctx.Counters("n").Add(ev.Payload, 1); err != nil {
		return err
	}
	if err := ctx.State("last").Put([]byte("payload"), ev.Payload); err != nil {
		return err
	}
	return ctx.Counters("n").Add([]byte("total"), 1)
}

func init() {
	flowlet.Register("api_count", func() flowlet.Flowlet { return countFlowlet{} }, flowlet.TypeInfo{})
}

const appYAML = `
app: api
flowlets:
  gen:
    type: generator
    config: {rate: 400, batch: 20, payload: "e{seq}", keys: {k: "{mod:7}"}}
  web:
    type: http_source
    config: {addr: "127.0.0.1:0"}
  cnt:
    type: api_count
    retries: {max: 0, backoff: 1ms, max_backoff: 1ms}
connections:
  - {from: gen, to: cnt, strategy: hash, key: k}
  - {from: web, to: cnt}
`

// startApp runs the test app and serves its API through httptest.
func startApp(t *testing.T, cfg httpapi.Config) (*runtime.App, *httptest.Server) {
	t.Helper()
	a, _ := openApp(t, appYAML)
	runApp(t, a)
	return a, serve(t, a, cfg)
}

// openApp writes yaml, with "{dir}" standing for a new temporary directory,
// to an app file there and opens the app, closed when the test ends.
func openApp(t testing.TB, yaml string) (a *runtime.App, dir string) {
	t.Helper()
	dir = t.TempDir()
	path := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(yaml, "{dir}", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := runtime.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err = runtime.Open(plan, runtime.Options{DataDir: filepath.Join(dir, "data"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, dir
}

// runApp runs a until the test ends: the run stops before cleanups
// registered earlier (openApp's Close) and after those registered later.
func runApp(t testing.TB, a *runtime.App) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}

// serve serves a's API through httptest until the test ends.
func serve(t *testing.T, a *runtime.App, cfg httpapi.Config) *httptest.Server {
	t.Helper()
	s, err := httpapi.New(a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

func do(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if strings.HasPrefix(body, "{") {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestAddressNeedsTokenOffLoopback(t *testing.T) {
	for _, c := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:0", "", true},
		{"127.0.0.1:8080", "", true},
		{"[::1]:0", "", true},
		{"localhost:0", "", true},
		{"", "", true}, // the default, 127.0.0.1:0
		{"0.0.0.0:0", "", false},
		{":8080", "", false},
		{"[::]:0", "", false},
		{"192.0.2.1:80", "", false},
		{"example.com:80", "", false},
		{"0.0.0.0:0", "s3cret-token", true},
		{"0.0.0.0:0", " ", false},             // blank
		{"0.0.0.0:0", "s3cret", false},        // shorter than MinTokenLen
		{"127.0.0.1:0", " pad-token ", false}, // padded: a copy-paste slip
		{"no-port", "", false},
	} {
		err := httpapi.CheckConfig(httpapi.Config{Addr: c.addr, Token: c.token})
		if (err == nil) != c.ok {
			t.Errorf("CheckConfig(%q, token %q) = %v, want ok=%v", c.addr, c.token, err, c.ok)
		}
		if !c.ok && c.token == "" && c.addr != "no-port" && !errors.Is(err, httpapi.ErrTokenRequired) {
			t.Errorf("CheckConfig(%q): %v, want ErrTokenRequired", c.addr, err)
		}
	}
	// New refuses too, before anything listens.
	if _, err := httpapi.New(nil, httpapi.Config{Addr: "0.0.0.0:0"}); !errors.Is(err, httpapi.ErrTokenRequired) {
		t.Errorf("New on 0.0.0.0 without a token: %v", err)
	}
}

func TestTokenAuth(t *testing.T) {
	const tok = "t0ken-for-tests"
	_, ts := startApp(t, httpapi.Config{Addr: "0.0.0.0:0", Token: tok})
	for _, path := range []string{"/ping", "/ready", "/metrics", "/api/v1/status", "/", "/ui/app.js"} {
		if code, _ := do(t, "GET", ts.URL+path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", path, code)
		}
		if code, _ := do(t, "GET", ts.URL+path, "wrong", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
	}
	if code, _ := do(t, "POST", ts.URL+"/api/v1/flowlets/cnt/scale", "", `{"instances": 2}`); code != http.StatusUnauthorized {
		t.Errorf("POST scale without a token: %d", code)
	}
	if code, b := do(t, "GET", ts.URL+"/ping", tok, ""); code != 200 || strings.TrimSpace(string(b)) != "pong" {
		t.Errorf("GET /ping with the token: %d %q", code, b)
	}
	// The scheme is case-insensitive (RFC 9110 §11.1): "bearer" used to
	// get a 401.
	for _, scheme := range []string{"bearer", "BEARER"} {
		req, _ := http.NewRequest("GET", ts.URL+"/ping", nil)
		req.Header.Set("Authorization", scheme+" "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET /ping with %q: %d, want 200", scheme+" TOKEN", resp.StatusCode)
		}
	}
	// The UI's way in: /?token= sets a cookie and redirects.
	if code := cookieLogin(t, ts.URL, tok); code != 200 {
		t.Errorf("status with the cookie: %d", code)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, err := client.Get(ts.URL + "/?token=wrong"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/?token=wrong: %v %v", resp.StatusCode, err)
	}
}

func TestLoopbackWithoutToken(t *testing.T) {
	_, ts := startApp(t, httpapi.Config{})
	if code, _ := do(t, "GET", ts.URL+"/ping", "", ""); code != 200 {
		t.Errorf("loopback /ping without a token: %d", code)
	}
	// DNS rebinding: a foreign host name reaching the loopback server.
	req, _ := http.NewRequest("GET", ts.URL+"/api/v1/status", nil)
	req.Host = "evil.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Host: %d, want 403", resp.StatusCode)
	}
	// Host names are case-insensitive.
	req, _ = http.NewRequest("GET", ts.URL+"/api/v1/status", nil)
	req.Host = "LOCALHOST:80"
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("Host LOCALHOST: %d, want 200", resp.StatusCode)
	}
	// Cross-origin writes.
	req, _ = http.NewRequest("POST", ts.URL+"/api/v1/flowlets/cnt/pause", nil)
	req.Header.Set("Origin", "http://evil.example")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST: %d, want 403", resp.StatusCode)
	}
}

func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	code, b := do(t, "GET", url, "", "")
	if code == 200 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return code
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func flowletOf(st runtime.Status, name string) runtime.FlowletStatus {
	for _, f := range st.Flowlets {
		if f.Name == name {
			return f
		}
	}
	return runtime.FlowletStatus{}
}

func TestAPI(t *testing.T) {
	a, ts := startApp(t, httpapi.Config{})
	u := ts.URL
	waitFor(t, "/ready", func() bool { return getJSON(t, u+"/ready", nil) == 200 })
	var st runtime.Status
	waitFor(t, "events counted", func() bool {
		getJSON(t, u+"/api/v1/status", &st)
		return flowletOf(st, "cnt").Processed > 0
	})
	if !st.Ready || st.App != "api" || len(st.Flowlets) != 3 {
		t.Errorf("status: %+v", st)
	}
	if f := flowletOf(st, "cnt"); len(f.Inputs) != 2 || f.Instances != 1 {
		t.Errorf("cnt: %+v", f)
	}

	// Metrics.
	code, body := do(t, "GET", u+"/metrics", "", "")
	for _, m := range []string{`flowrun_flowlet_processed_total{app="api",flowlet="cnt"}`, "flowrun_tx_commits_total", "flowrun_tx_commits_deferred_total", "flowrun_tx_conflicts_total",
		"flowrun_tx_log_syncs_total", "flowrun_tx_log_gathers_total", "flowrun_tx_log_gathers_joined_total",
		"flowrun_tx_aborts_total", `flowrun_queue_pending{app="api",group="cnt",queue="gen.out"}`, "flowrun_step_duration_seconds_bucket",
		"flowrun_tx_commit_duration_seconds_count", "flowrun_flowlet_dead_lettered_total", "flowrun_flowlet_failed_total", "flowrun_flowlet_too_large_total", "go_goroutines"} {
		if code != 200 || !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s (code %d)", m, code)
		}
	}
	if code, _ := do(t, "GET", u+"/debug/pprof/", "", ""); code == 200 {
		t.Error("pprof served without Config.Pprof")
	}

	// Tail selections: bad ones are 400s.
	for _, c := range []struct {
		query string
		code  int
	}{
		{"?partition=0,1&from=1&since=1h", 200},
		{"?partition=x", 400},
		{"?partition=99", 400},
		{"?from=abc", 400},
		{"?until=yesterday", 400},
	} {
		if code, b := do(t, "GET", u+"/api/v1/queues/gen.out/tail"+c.query, "", ""); code != c.code {
			t.Errorf("tail%s: %d %s, want %d", c.query, code, b, c.code)
		}
	}

	// A known path with the wrong method is a 405, an unknown one a 404.
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"POST", "/ping", 405},
		{"DELETE", "/", 405},
		{"POST", "/api/v1/status", 405},
		{"GET", "/api/v1/flowlets/cnt/scale", 405},
		{"GET", "/api/v1/nope", 404},
		{"GET", "/ping", 200},
	} {
		if code, b := do(t, c.method, u+c.path, "", ""); code != c.code {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, b, c.code)
		}
	}

	// Scale: errors first.
	for _, c := range []struct {
		path, body string
		code       int
	}{
		{"/api/v1/flowlets/nope/scale", `{"instances": 2}`, 404},
		{"/api/v1/flowlets/gen/scale", `{"instances": 2}`, 409},
		{"/api/v1/flowlets/cnt/scale", `{"instances": 0}`, 400},
		{"/api/v1/flowlets/cnt/scale", `{"instances": 100000}`, 400},
		{"/api/v1/flowlets/cnt/scale", `not json`, 400},
	} {
		if code, b := do(t, "POST", u+c.path, "", c.body); code != c.code {
			t.Errorf("POST %s %s: %d %s, want %d", c.path, c.body, code, b, c.code)
		}
	}
	code, b := do(t, "POST", u+"/api/v1/flowlets/cnt/scale", "", `{"instances": 3}`)
	var sr httpapi.ScaleResponse
	json.Unmarshal(b, &sr)
	if code != 200 || sr.Previous != 1 || sr.Instances != 3 {
		t.Fatalf("scale: %d %s", code, b)
	}
	getJSON(t, u+"/api/v1/status", &st)
	if flowletOf(st, "cnt").Instances != 3 {
		t.Errorf("status after scale: %+v", flowletOf(st, "cnt"))
	}
	if code, _ := do(t, "GET", u+"/api/v1/flowlets/cnt/scale", "", ""); code != http.StatusMethodNotAllowed && code != http.StatusNotFound {
		t.Errorf("GET on scale: %d", code)
	}

	// Pause: processing stops, backlog grows; resume: it drains again.
	for _, q := range []string{"?wait=0s", "?wait=3m", "?wait=x"} {
		if code, b := do(t, "POST", u+"/api/v1/flowlets/cnt/pause"+q, "", ""); code != 400 {
			t.Errorf("pause%s: %d %s, want 400", q, code, b)
		}
	}
	if code, b := do(t, "POST", u+"/api/v1/flowlets/cnt/resume?wait=1s", "", ""); code != 400 {
		t.Errorf("resume?wait=1s: %d %s, want 400", code, b)
	}
	if flowletOf(a.Status(), "cnt").Paused {
		t.Fatal("a refused pause paused cnt")
	}
	// The answer waits until the steps in flight are done: no step of cnt
	// runs from then on.
	if code, b := do(t, "POST", u+"/api/v1/flowlets/cnt/pause?wait=1m", "", ""); code != 200 || !strings.Contains(string(b), `"paused": true`) || !strings.Contains(string(b), `"parked": true`) {
		t.Fatalf("pause: %d %s", code, b)
	}
	p0 := flowletOf(a.Status(), "cnt").Processed
	time.Sleep(500 * time.Millisecond) // a window for a step that should not run
	if f := flowletOf(a.Status(), "cnt"); f.Processed != p0 || !f.Paused || !f.Parked || f.Busy != 0 {
		t.Errorf("paused cnt: processed %d → %d, %+v", p0, f.Processed, f)
	}
	waitFor(t, "a backlog of the paused cnt", func() bool { return flowletOf(a.Status(), "cnt").Backlog > 0 })
	if f := flowletOf(a.Status(), "cnt"); f.Processed != p0 {
		t.Errorf("paused cnt: processed %d → %d, %+v", p0, f.Processed, f)
	}
	if code, b := do(t, "POST", u+"/api/v1/flowlets/cnt/pause", "", ""); code != 200 || !strings.Contains(string(b), `"parked": true`) {
		t.Errorf("pause again: %d %s", code, b)
	}
	if code, _ := do(t, "POST", u+"/api/v1/flowlets/cnt/resume", "", ""); code != 200 {
		t.Fatalf("resume: %d", code)
	}
	waitFor(t, "processing after resume", func() bool { return flowletOf(a.Status(), "cnt").Processed > p0 })

	// Ingest into a flowlet's input (the hashed queue needs its key), and
	// into the http_source.
	code, b = do(t, "POST", u+"/api/v1/ingest/cnt?input=gen.out", "", `{"events": [{"payload": "hello", "keys": {"k": "1"}}, {"payload_base64": "aGk=", "keys": {"k": "2"}}]}`)
	if code != 200 || !strings.Contains(string(b), `"accepted": 2`) {
		t.Fatalf("ingest to cnt: %d %s", code, b)
	}
	if code, b := do(t, "POST", u+"/api/v1/ingest/cnt?input=gen.out", "", `{"events": [{"payload": "nokey"}]}`); code != 400 {
		t.Errorf("ingest without the queue's key: %d %s", code, b)
	}
	// Media types are case-insensitive and may carry parameters: still
	// JSON (it was stored as one text event).
	req, _ := http.NewRequest("POST", u+"/api/v1/ingest/cnt?input=gen.out", strings.NewReader(`{"events": [{"payload": "nokey"}]}`))
	req.Header.Set("Content-Type", "Application/JSON; charset=utf-8")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Errorf("ingest with Content-Type Application/JSON: %v %v, want 400 (read as JSON: no key)", resp, err)
	} else {
		resp.Body.Close()
	}
	if code, b := do(t, "POST", u+"/api/v1/ingest/cnt", "", "x\n"); code != 400 {
		t.Errorf("ingest to a flowlet with two inputs without ?input: %d %s", code, b)
	}
	if code, b := do(t, "POST", u+"/api/v1/ingest/gen", "", "x\n"); code != 400 {
		t.Errorf("ingest to the generator: %d %s", code, b)
	}
	code, b = do(t, "POST", u+"/api/v1/ingest/web", "", "w1\nw2\r\n\nbad1\nbad2\n")
	if code != 200 || !strings.Contains(string(b), `"accepted": 4`) {
		t.Fatalf("ingest to the http_source: %d %s", code, b)
	}
	count := func(key string) int64 {
		var tj httpapi.StateTable
		if code := getJSON(t, u+"/api/v1/state/cnt/n?key="+key, &tj); code != 200 || len(tj.Entries) != 1 || tj.Entries[0].Count == nil {
			return -1
		}
		return *tj.Entries[0].Count
	}
	waitFor(t, "ingested events counted", func() bool {
		return count("hello") == 1 && count("hi") == 1 && count("w1") == 1 && count("w2") == 1
	})

	// State: tables, a scan, a missing key, an unknown table.
	var tables []runtime.TableInfo
	if getJSON(t, u+"/api/v1/state/cnt", &tables); len(tables) != 2 {
		t.Errorf("tables: %+v", tables)
	}
	var scan httpapi.StateTable
	if code := getJSON(t, u+"/api/v1/state/cnt/n?prefix=w&limit=10", &scan); code != 200 || scan.Kind != "counters" || len(scan.Entries) != 2 {
		t.Errorf("scan: %d %+v", code, scan)
	}
	if code := getJSON(t, u+"/api/v1/state/cnt/last?key=nope", nil); code != 404 {
		t.Errorf("missing key: %d", code)
	}
	if code := getJSON(t, u+"/api/v1/state/cnt/nope", nil); code != 404 {
		t.Errorf("unknown table: %d", code)
	}
	if code := getJSON(t, u+"/api/v1/state/nope", nil); code != 404 {
		t.Errorf("unknown flowlet: %d", code)
	}

	// Queues and tail.
	var qs []httpapi.QueueJSON
	if getJSON(t, u+"/api/v1/queues", &qs); len(qs) < 4 {
		t.Errorf("queues: %+v", qs)
	}
	var tail []httpapi.EntryJSON
	if code := getJSON(t, u+"/api/v1/queues/gen.out/tail?n=3", &tail); code != 200 || len(tail) > 3 {
		t.Errorf("tail: %d %+v", code, tail)
	}
	if code := getJSON(t, u+"/api/v1/queues/nope/tail", nil); code != 404 {
		t.Errorf("tail of an unknown queue: %d", code)
	}

	// Dead letters: bad1 and bad2 failed (no retries); replay sends them
	// through cnt again, where they fail again.
	var dl []httpapi.DeadLetterJSON
	waitFor(t, "two dead letters", func() bool {
		getJSON(t, u+"/api/v1/dlq/cnt", &dl)
		return len(dl) == 2
	})
	if dl[0].Flowlet != "cnt" || dl[0].Input != "web.out" || !strings.Contains(dl[0].Error, "refusing") || dl[0].Payload.Text == nil {
		t.Errorf("dead letter: %+v", dl[0])
	}
	var all []httpapi.DeadLetterJSON
	if getJSON(t, u+"/api/v1/dlq", &all); len(all) != 2 {
		t.Errorf("all dead letters: %+v", all)
	}
	code, b = do(t, "POST", u+"/api/v1/dlq/cnt/replay", "", "")
	if code != 200 || !strings.Contains(string(b), `"replayed": 2`) {
		t.Fatalf("replay: %d %s", code, b)
	}
	waitFor(t, "replayed letters dead again", func() bool {
		getJSON(t, u+"/api/v1/dlq/cnt", &dl)
		return len(dl) == 2 && dl[0].Attempts == 2
	})
	if code, _ := do(t, "POST", u+"/api/v1/dlq/gen/replay", "", ""); code != 400 {
		t.Errorf("replay of a source: %d", code)
	}

	// The UI.
	code, b = do(t, "GET", u+"/", "", "")
	if code != 200 || !strings.Contains(string(b), `<svg id="graph"`) {
		t.Errorf("UI: %d", code)
	}
	if code, b := do(t, "GET", u+"/ui/app.js", "", ""); code != 200 || !strings.Contains(string(b), "drawGraph") {
		t.Errorf("app.js: %d", code)
	}
	if code, _ := do(t, "GET", u+"/api/v1/nope", "", ""); code != 404 {
		t.Errorf("unknown API path: %d", code)
	}

	// Scale back down through the client.
	c := &httpapi.Client{URL: u}
	r, err := c.Scale(context.Background(), "cnt", 1)
	if err != nil || r.Previous != 3 || r.Instances != 1 {
		t.Errorf("client scale: %+v %v", r, err)
	}
	if _, err := c.Scale(context.Background(), "gen", 2); err == nil || !strings.Contains(err.Error(), "source") {
		t.Errorf("client scale of a source: %v", err)
	}
}

func TestPprofFlag(t *testing.T) {
	_, ts := startApp(t, httpapi.Config{Pprof: true})
	if code, _ := do(t, "GET", ts.URL+"/debug/pprof/", "", ""); code != 200 {
		t.Errorf("pprof index: %d", code)
	}
}

// A server on every interface writes a URL this machine can reach
// (127.0.0.1), not "[::]".
func TestURLOfUnspecifiedAddress(t *testing.T) {
	a, _ := startApp(t, httpapi.Config{})
	s, err := httpapi.New(a, httpapi.Config{Addr: "0.0.0.0:0", Token: "t0ken-for-tests"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if u := s.URL(); !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("URL %q, want http://127.0.0.1:PORT", u)
	}
}

// The cookie login works whatever characters the token has: a token with a
// character a cookie value cannot hold (';', '"', '\', non-ASCII) got a
// cookie with those dropped, and every request after the login a 401.
func TestCookieLoginAnyToken(t *testing.T) {
	a, _ := openApp(t, appYAML)
	for _, tok := range []string{"plain-t0ken", `sem;colon"quote\back`, "pässwörd-ünicode"} {
		ts := serve(t, a, httpapi.Config{Token: tok})
		if code := cookieLogin(t, ts.URL, tok); code != 200 {
			t.Errorf("token %q: status with the login's cookie: %d, want 200", tok, code)
		}
	}
}

// cookieLogin logs in as the UI does (/?token=: a redirect setting an
// HttpOnly cookie) and answers the status code of /api/v1/status with that
// cookie.
func cookieLogin(t *testing.T, base, tok string) int {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(base + "/?token=" + url.QueryEscape(tok))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || !resp.Cookies()[0].HttpOnly {
		t.Fatalf("/?token=: %d cookies %v", resp.StatusCode, resp.Cookies())
	}
	req, _ := http.NewRequest("GET", base+"/api/v1/status", nil)
	req.AddCookie(resp.Cookies()[0])
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
