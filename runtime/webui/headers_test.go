package webui_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime/webui"
)

// The page may not be framed by another site (clickjacking of its Scale,
// Pause and Replay buttons): CSP frame-ancestors and X-Frame-Options, on
// every path that serves it — /ui/ (the assets' directory index) and
// /ui/index.html used to serve it without either.
func TestPageRefusesFraming(t *testing.T) {
	for _, path := range []string{"/", "/ui/", "/ui/index.html", "/ui/app.js", "/ui/nope"} {
		rec := httptest.NewRecorder()
		webui.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if path == "/" && rec.Code != 200 {
			t.Fatalf("GET /: %d", rec.Code)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: %d, CSP %q lacks frame-ancestors 'none'", path, rec.Code, csp)
		}
		if xfo := rec.Header().Get("X-Frame-Options"); xfo != "DENY" {
			t.Errorf("GET %s: %d, X-Frame-Options %q, want DENY", path, rec.Code, xfo)
		}
	}
}
