package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/flowrun/flowrun/runtime"
)

// An ingest whose events were taken but not committed (its step failed
// alone, as too slow) is 503, to be sent again: it answered 500, which
// says nothing about whether sending it again is safe.
func TestFailNotCommittedIs503(t *testing.T) {
	w := httptest.NewRecorder()
	fail(w, fmt.Errorf("%w: %w", runtime.ErrNotCommitted, errors.New("step timed out")))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503 (%s)", w.Code, w.Body)
	}
}
