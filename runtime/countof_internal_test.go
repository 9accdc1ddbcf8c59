package runtime

import "testing"

// countOf reads a committed counter of a flowlet of a running app.
func countOf(t *testing.T, a *App, flowlet, counters, key string) int64 {
	t.Helper()
	var n int64
	if err := a.View(flowlet, func(r StateReader) error {
		var err error
		n, err = r.Counters(counters).Get([]byte(key))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}
