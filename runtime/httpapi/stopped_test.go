package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// TestClosedAppAnswers503: a request that reaches the store after the app
// closed it (one still in flight when `flowrun run` stops: the server's
// shutdown waits for it only so long) is answered 503 "not running", as
// specs/http.md says, not 500 "DB Closed".
func TestClosedAppAnswers503(t *testing.T) {
	a, ts := stoppedApp(t)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/v1/state/cnt", ""},
		{"GET", "/api/v1/state/cnt/n", ""},
		{"GET", "/api/v1/state/cnt/last?kind=table&key=payload", ""},
		{"GET", "/api/v1/queues", ""},
		{"GET", "/api/v1/queues/gen.out/tail", ""},
		{"GET", "/api/v1/dlq", ""},
		{"GET", "/api/v1/dlq/cnt", ""},
		{"POST", "/api/v1/dlq/cnt/replay", ""},
		{"POST", "/api/v1/ingest/cnt?input=web.out", "a\n"},
		{"POST", "/api/v1/flowlets/cnt/scale", `{"instances": 2}`},
		{"POST", "/api/v1/flowlets/cnt/pause", ""},
		{"POST", "/api/v1/flowlets/cnt/resume", ""},
	} {
		code, body := do(t, c.method, ts.URL+c.path, "", c.body)
		var e struct {
			Error string `json:"error"`
		}
		if code != 503 || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%s %s on a closed app: %d %s, want 503 and a JSON error", c.method, c.path, code, body)
		}
	}
}

// TestStoppedAppPauseAnswers503: once Run returned, a pause or resume
// changes nothing that will run: 503 (app not running), as every other call
// that needs the running app, not 200 "paused" (or "parked": true).
func TestStoppedAppPauseAnswers503(t *testing.T) {
	_, ts := stoppedApp(t)
	for _, p := range []string{"/api/v1/flowlets/cnt/pause", "/api/v1/flowlets/cnt/pause?wait=1s", "/api/v1/flowlets/cnt/resume"} {
		if code, body := do(t, "POST", ts.URL+p, "", ""); code != 503 {
			t.Errorf("POST %s after Run returned: %d %s, want 503", p, code, body)
		}
	}
}

// stoppedApp opens the test app, lets Run return at once and serves it:
// an app whose run is over, not yet closed.
func stoppedApp(t *testing.T) (*runtime.App, *httptest.Server) {
	t.Helper()
	a, _ := openApp(t, appYAML)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return a, serve(t, a, httpapi.Config{})
}
