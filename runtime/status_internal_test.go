package runtime

import (
	"testing"
	"time"
)

// The first window of a rate starts with the first events: a first reading
// long after them gives their rate, not 0, and does not carry them into the
// next window (a user saw 0, then 3757/s for a 500/s generator).
func TestRateMeterWindows(t *testing.T) {
	var idle rateMeter
	if got := idle.rate(time.Now()); got != 0 {
		t.Fatalf("no events: rate %v, want 0", got)
	}
	var r rateMeter
	r.add(1000)
	if got := r.rate(r.since.Add(8 * time.Second)); got != 125 {
		t.Fatalf("first reading 8 s after the first events: %v/s, want 125", got)
	}
	r.add(500)
	if got := r.rate(r.since.Add(500 * time.Millisecond)); got != 125 {
		t.Fatalf("within a window: %v/s, want the last full window's 125", got)
	}
	if got := r.rate(r.since.Add(8 * time.Second)); got != 62.5 {
		t.Fatalf("second window: %v/s, want 62.5", got)
	}
}
