package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// top ends with exit 0 when the app it watched stops (its address refuses
// connections), instead of failing as if it never could reach it.
func TestTopAppStops(t *testing.T) {
	t.Setenv("FLOWRUN_HTTP_TOKEN", "")
	var n atomic.Int32
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"app": "watched", "ready": true}`))
		if n.Add(1) == 2 {
			go srv.Close() // the app stops
		}
	}))
	defer srv.Close()
	code, out := runCLI(t, "top", "watched", "--addr", srv.URL, "--interval", "10ms")
	if code != 0 || !strings.Contains(out, "app watched  running") || !strings.Contains(out, "app watched stopped") {
		t.Fatalf("top of an app that stops: exit %d, want 0 and \"app watched stopped\"\n%s", code, out)
	}

	// Never reached: still an error.
	code, out = runCLI(t, "top", "watched", "--addr", srv.URL, "--interval", "10ms")
	if code != ExitFailure || !strings.Contains(out, "cannot reach the app") {
		t.Fatalf("top of an app never reached: exit %d, want 1\n%s", code, out)
	}
}

// scale says "instance" for one.
func TestScaleOutput(t *testing.T) {
	t.Setenv("FLOWRUN_HTTP_TOKEN", "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/flowlets/parser/scale" {
			http.Error(w, `{"error": "unexpected request"}`, http.StatusNotFound)
			return
		}
		w.Write([]byte(`{"flowlet": "parser", "previous": 2, "instances": 1}`))
	}))
	defer srv.Close()
	code, out := runCLI(t, "scale", "app", "parser", "1", "--addr", srv.URL)
	if code != 0 || out != "parser: 2 → 1 instance\n" {
		t.Fatalf("scale: exit %d\n%q", code, out)
	}
}

// A data directory's http.json left by a run killed with -9 does not send
// status or scale to whatever serves its address now: the process is gone,
// or the address serves another app.
func TestStaleAddrFile(t *testing.T) {
	t.Setenv("FLOWRUN_HTTP_TOKEN", "")
	srv, scaled := otherApp(t)
	data := t.TempDir()
	write := func(pid int, tokenRequired bool) {
		t.Helper()
		if err := httpapi.WriteAddrFile(data, httpapi.AddrInfo{URL: srv.URL, PID: pid, App: "live", TokenRequired: tokenRequired}); err != nil {
			t.Fatal(err)
		}
	}
	const dead = 1<<22 + 1 // above Linux's largest pid_max: never a process
	for _, c := range []struct {
		pid           int
		tokenRequired bool // and none given: used to ask for one
		want          string
	}{
		{dead, false, fmt.Sprintf("process %d is gone", dead)},
		{dead, true, fmt.Sprintf("process %d is gone", dead)},
		{os.Getpid(), false, srv.URL + ` serves app "other" now`},
	} {
		write(c.pid, c.tokenRequired)
		for _, args := range [][]string{{"status", "live"}, {"scale", "live", "parser", "3"}} {
			code, out := runCLI(t, append(args, "--data", data)...)
			if code != ExitFailure || !strings.Contains(out, `app "live" is not running: `+c.want) {
				t.Errorf("%v with a stale http.json (pid %d): exit %d\n%s", args, c.pid, code, out)
			}
		}
	}
	if n := scaled.Load(); n != 0 {
		t.Errorf("%d scale requests reached the other app", n)
	}
}

// --addr reaching another app than APP (a wrong or stale address) sends it
// no scale: status showed the other app's status and scale changed its
// flowlet of the same name, where the address file's is refused (above).
func TestAddrServesOtherApp(t *testing.T) {
	t.Setenv("FLOWRUN_HTTP_TOKEN", "")
	srv, scaled := otherApp(t)
	for _, args := range [][]string{{"status", "live"}, {"scale", "live", "parser", "3"}, {"top", "live", "-n", "1"}} {
		code, out := runCLI(t, append(args, "--addr", srv.URL)...)
		if code != ExitFailure || !strings.Contains(out, srv.URL+` serves app "other", not "live"`) {
			t.Errorf("%v --addr of another app: exit %d, want 1 naming it\n%s", args, code, out)
		}
	}
	if n := scaled.Load(); n != 0 {
		t.Errorf("%d scale requests reached the other app", n)
	}
	if code, out := runCLI(t, "scale", "other", "parser", "3", "--addr", srv.URL); code != 0 || scaled.Load() != 1 {
		t.Errorf("scale of the app at --addr: exit %d\n%s", code, out)
	}
}

// otherApp serves app "other", counting the scale requests it gets.
func otherApp(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var scaled atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			scaled.Add(1)
			w.Write([]byte(`{"flowlet": "parser", "previous": 1, "instances": 3}`))
			return
		}
		w.Write([]byte(`{"app": "other", "ready": true}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &scaled
}

// status tells a pause that took effect (no step runs) from one whose steps
// in flight are still finishing.
func TestStatusPausedOrPausing(t *testing.T) {
	t.Setenv("FLOWRUN_HTTP_TOKEN", "")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"app": "a", "ready": true, "flowlets": [
			{"name": "parked", "type": "t", "instances": 2, "paused": true, "parked": true, "busy": 0},
			{"name": "finishing", "type": "t", "instances": 2, "paused": true, "busy": 1},
			{"name": "running", "type": "t", "instances": 1, "busy": 1},
			{"name": "older", "type": "t", "instances": 1, "paused": true}]}`))
	}))
	defer srv.Close()
	code, out := runCLI(t, "status", "a", "--addr", srv.URL)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if name, _, ok := strings.Cut(l, " "); ok {
			lines[name] = strings.TrimSpace(l)
		}
	}
	for name, want := range map[string]string{"parked": "paused", "finishing": "pausing (1 busy)", "older": "paused"} {
		if !strings.HasSuffix(lines[name], want) {
			t.Errorf("%s: %q, want it to end in %q\n%s", name, lines[name], want, out)
		}
	}
	if strings.Contains(lines["running"], "paus") {
		t.Errorf("a running flowlet shown as paused:\n%s", out)
	}
}

// A flowlet's last error (user code's text, often with a payload in it)
// reaches the operator's terminal escaped: raw, an ESC or a C1 control in it
// drove the terminal, and a cut in the middle of a character left invalid
// UTF-8.
func TestLastErrorEscaped(t *testing.T) {
	for _, lastErr := range []string{"bad line \x1b]0;owned\x07\x1b[2J", "bad line \u009b31m", "bad line " + strings.Repeat("é", 40)} {
		st := runtime.Status{App: "a", Flowlets: []runtime.FlowletStatus{{Name: "f", Type: "t", Failed: 1, LastError: lastErr}}}
		var status, summary strings.Builder
		writeStatus(&status, st, "http://x")
		printSummary(&summary, st, nil)
		for what, out := range map[string]string{"status": status.String(), "summary": summary.String(), "printable": printable([]byte(lastErr))} {
			if strings.ContainsAny(out, "\x1b\x07\u009b") || !utf8.ValidString(out) || !strings.Contains(out, "bad line") {
				t.Errorf("%s of %q: control characters, invalid UTF-8 or no error in\n%q", what, lastErr, out)
			}
		}
	}
}
