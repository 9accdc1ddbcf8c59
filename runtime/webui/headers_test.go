package webui_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime/webui"
)

// The page may not be framed by another site (clickjacking of its Scale,
// Pause and Replay buttons): CSP frame-ancestors and X-Frame-Options.
func TestPageRefusesFraming(t *testing.T) {
	rec := httptest.NewRecorder()
	webui.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /: %d", rec.Code)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q lacks frame-ancestors 'none'", csp)
	}
	if xfo := rec.Header().Get("X-Frame-Options"); xfo != "DENY" {
		t.Errorf("X-Frame-Options %q, want DENY", xfo)
	}
}
