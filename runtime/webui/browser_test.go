package webui_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/runtime"
	_ "github.com/flowrun/flowrun/runtime/builtin"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// TestBrowserWeblogUI runs the weblog example (examples/weblog/app.yaml,
// its reader following a log file the test keeps appending to), serves its
// HTTP API and UI, and drives headless Chromium through chromedriver's
// WebDriver protocol: every flowlet of the app is drawn in the graph and
// shows a non-zero rate, scaling page_views from the UI reaches the app and
// the new instance count comes back to the page, and a screenshot is saved
// (its path is logged; FLOWRUN_SCREENSHOT sets it).
//
// Without chromium and chromedriver the test skips, except in CI
// (CI=true), where it fails: .ci/run installs them.
func TestBrowserWeblogUI(t *testing.T) {
	chrome, driver := findBrowser(t)

	// The app.
	dir := t.TempDir()
	logPath := filepath.Join(dir, "access.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEBLOG_INPUT", logPath)
	t.Setenv("WEBLOG_HOURS", filepath.Join(dir, "hours.jsonl"))
	plan, err := runtime.ParseFile("../../examples/weblog/app.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reader := plan.Flowlet("reader")
	if reader == nil || reader.Type != "file_source" {
		t.Fatalf("examples/weblog/app.yaml changed: no file_source named reader")
	}
	reader.Config["follow"] = true // keep the events flowing
	a, err := runtime.Open(plan, runtime.Options{DataDir: filepath.Join(dir, "data"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); feedLog(ctx, t, logPath) }()
	srv, err := httpapi.New(a, httpapi.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Close(context.Background())
		cancel()
		wg.Wait()
		if err := <-runErr; err != nil {
			t.Errorf("run: %v", err)
		}
		a.Close()
	}()

	// The browser.
	wd := startDriver(t, driver, chrome, filepath.Join(dir, "chrome-profile"))
	defer wd.quit()
	wd.call("POST", "/url", map[string]any{"url": srv.URL() + "/"}, nil)

	// Every flowlet drawn, each seen with a non-zero rate within the
	// window (the sink of closed hours only gets events now and then).
	want := map[string]bool{}
	for _, f := range plan.Flowlets {
		want[f.Name] = true
	}
	seen := map[string]float64{}
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	for len(seen) < len(want) {
		if time.Now().After(deadline) {
			wd.screenshot(t)
			t.Fatalf("flowlets never seen with a non-zero rate: want %v, seen %v; status %+v", keys(want), seen, a.Status())
		}
		var nodes []struct {
			Name      string `json:"name"`
			Rate      string `json:"rate"`
			Instances string `json:"instances"`
		}
		wd.call("POST", "/execute/sync", map[string]any{"args": []any{}, "script": `return Array.from(document.querySelectorAll("#graph g.node")).map(n => ({name: n.dataset.flowlet, rate: n.getAttribute("data-rate") || "0", instances: n.getAttribute("data-instances") || ""}))`}, &nodes)
		for _, n := range nodes {
			if !want[n.Name] {
				t.Fatalf("the graph shows %q, not a flowlet of the app", n.Name)
			}
			var r float64
			fmt.Sscan(n.Rate, &r)
			if r > 0 {
				seen[n.Name] = max(seen[n.Name], r)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("rates seen in the UI after %s (events/s): %v", time.Since(start).Round(time.Millisecond), seen)
	var edges int
	wd.call("POST", "/execute/sync", map[string]any{"args": []any{}, "script": `return document.querySelectorAll("#graph g.edge").length`}, &edges)
	if edges != len(plan.Connections) {
		t.Errorf("graph has %d edges, want %d (one per connection)", edges, len(plan.Connections))
	}

	// Scale page_views from 2 to 3 instances in the UI.
	before := a.Instances("page_views")
	input := wd.find(t, "#scale-input-page_views")
	wd.call("POST", "/element/"+input+"/clear", map[string]any{}, nil)
	wd.call("POST", "/element/"+input+"/value", map[string]any{"text": "3"}, nil)
	wd.call("POST", "/element/"+wd.find(t, "#scale-btn-page_views")+"/click", map[string]any{}, nil)
	deadline = time.Now().Add(30 * time.Second)
	for {
		var inst string
		wd.call("POST", "/execute/sync", map[string]any{"args": []any{}, "script": `const n = document.querySelector('#graph g.node[data-flowlet="page_views"]'); return n ? n.getAttribute("data-instances") : ""`}, &inst)
		if inst == "3" {
			break
		}
		if time.Now().After(deadline) {
			var m string
			wd.call("POST", "/execute/sync", map[string]any{"args": []any{}, "script": `return document.querySelector("#msg").textContent`}, &m)
			wd.screenshot(t)
			t.Fatalf("page_views shows %q instances after scaling to 3 (message %q, app has %d)", inst, m, a.Instances("page_views"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := a.Instances("page_views"); before != 2 || got != 3 {
		t.Errorf("page_views instances %d → %d, want 2 → 3", before, got)
	}
	t.Logf("scaled page_views in the UI after %s", time.Since(start).Round(time.Millisecond))

	// Pause page_views in the UI: its node says "paused" once no step runs
	// (parked), then Resume brings it back.
	nodeText := func() string {
		var s string
		wd.call("POST", "/execute/sync", map[string]any{"args": []any{}, "script": `const n = document.querySelector('#graph g.node[data-flowlet="page_views"] text.backlog'); return n ? n.textContent : ""`}, &s)
		return s
	}
	waitText := func(what string, ok func(string) bool) {
		deadline := time.Now().Add(30 * time.Second)
		for s := nodeText(); !ok(s); s = nodeText() {
			if time.Now().After(deadline) {
				wd.screenshot(t)
				t.Fatalf("page_views node says %q, want it %s; status %+v", s, what, a.Status())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	wd.call("POST", "/element/"+wd.find(t, "#pause-btn-page_views")+"/click", map[string]any{}, nil)
	if err := a.WaitPaused(context.Background(), "page_views"); err != nil {
		t.Fatal(err)
	}
	waitText("paused", func(s string) bool { return strings.HasSuffix(s, "· paused") })
	wd.call("POST", "/element/"+wd.find(t, "#pause-btn-page_views")+"/click", map[string]any{}, nil)
	waitText("running", func(s string) bool { return s != "" && !strings.Contains(s, "paus") })
	// Let the new instance count events, then take the picture.
	time.Sleep(1500 * time.Millisecond)
	wd.screenshot(t)
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// findBrowser returns chromium's binary and chromedriver, or skips (fails in CI).
func findBrowser(t *testing.T) (chrome, driver string) {
	t.Helper()
	for _, c := range []string{"/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(c); err == nil {
			chrome = p
			break
		}
	}
	driver, _ = exec.LookPath("chromedriver")
	if chrome == "" || driver == "" {
		msg := "headless Chromium test needs chromium and chromedriver (Debian: apt-get install -y chromium chromium-driver)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true, so this fails instead of skipping (.ci/run installs them)")
		}
		t.Skip(msg)
	}
	return chrome, driver
}

// feedLog appends well-formed access-log lines (and a malformed one now and
// then) at about 1000 lines/s; each line's time advances 1s, so a UTC hour
// passes about every 3.6s of wall time: longer than bytes_per_hour's grace
// (2s without a later hour), so it keeps closing hours for the file sink.
func feedLog(ctx context.Context, t *testing.T, path string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	ts := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	paths := []string{"/", "/docs/index.html", "/blog/a", "/blog/b", "/about", "/img/logo.png", "/api/items?id=4"}
	statuses := []string{"200", "200", "200", "304", "404", "500"}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	n := 0
	w := bufio.NewWriter(f)
	for {
		for range 100 {
			if n%97 == 50 {
				fmt.Fprintf(w, "this is not an access log line %d\n", n)
			} else {
				fmt.Fprintf(w, "203.0.113.%d - - [%s] \"GET %s HTTP/1.1\" %s %d \"http://example.com/\" \"Mozilla/5.0 (X11)\"\n",
					n%200, ts.Format("02/Jan/2006:15:04:05 -0700"), paths[n%len(paths)], statuses[n%len(statuses)], 100+n%5000)
			}
			ts = ts.Add(time.Second)
			n++
		}
		if err := w.Flush(); err != nil {
			t.Error(err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// webDriver is a chromedriver session.
type webDriver struct {
	t       *testing.T
	base    string
	session string
	cmd     *exec.Cmd
	logs    *bytes.Buffer
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startDriver(t *testing.T, driver, chrome, profile string) *webDriver {
	t.Helper()
	port := freePort(t)
	var logs bytes.Buffer
	cmd := exec.Command(driver, fmt.Sprintf("--port=%d", port))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	wd := &webDriver{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd, logs: &logs}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(wd.base + "/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("chromedriver did not start: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{
			"binary": chrome,
			"args": []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
				"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
				"--user-data-dir=" + profile, "--window-size=1500,1650"},
		},
	}}}
	var res struct {
		SessionID string `json:"sessionId"`
	}
	wd.raw("POST", "/session", caps, &res)
	if res.SessionID == "" {
		wd.kill()
		t.Fatalf("no WebDriver session\n%s", logs.String())
	}
	wd.session = res.SessionID
	return wd
}

// raw sends a WebDriver command and decodes its "value" into out.
func (wd *webDriver) raw(method, path string, body, out any) {
	wd.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, wd.base+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		wd.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(data, &env); err != nil || resp.StatusCode != 200 {
		wd.t.Fatalf("webdriver %s %s: HTTP %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(env.Value, out); err != nil {
			wd.t.Fatalf("webdriver %s %s: %v in %s", method, path, err, env.Value)
		}
	}
}

// call sends a command of the session.
func (wd *webDriver) call(method, path string, body, out any) {
	wd.t.Helper()
	wd.raw(method, "/session/"+wd.session+path, body, out)
}

func (wd *webDriver) find(t *testing.T, css string) string {
	t.Helper()
	var el map[string]string
	wd.call("POST", "/element", map[string]any{"using": "css selector", "value": css}, &el)
	for _, id := range el {
		return id
	}
	t.Fatalf("no element %s", css)
	return ""
}

func (wd *webDriver) screenshot(t *testing.T) {
	t.Helper()
	var b64 string
	wd.call("GET", "/screenshot", nil, &b64)
	png, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("FLOWRUN_SCREENSHOT")
	if path == "" {
		path = filepath.Join(os.TempDir(), "flowrun-webui-weblog.png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the UI (%d bytes): %s", len(png), path)
}

func (wd *webDriver) quit() {
	if wd.session != "" {
		req, _ := http.NewRequest("DELETE", wd.base+"/session/"+wd.session, nil)
		if resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req); err == nil {
			resp.Body.Close()
		}
	}
	wd.kill()
}

func (wd *webDriver) kill() {
	wd.cmd.Process.Kill()
	wd.cmd.Wait()
	if strings.Contains(wd.logs.String(), "panic") {
		wd.t.Logf("chromedriver:\n%s", wd.logs.String())
	}
}
