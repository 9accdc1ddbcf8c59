package tx

import (
	"math"
	"testing"
	"time"
)

// Huge configured timeouts must not wrap the expiry into the past: a
// transaction allowed to live "forever" must not time out at once.
func TestHugeTimeoutsDoNotWrap(t *testing.T) {
	clk := newFakeClock()
	c := mustOpen(t, Options{MaxTimeout: math.MaxInt64, LongTimeout: math.MaxInt64, Now: clk.Now})
	short := must[*Tx](t)(c.StartShort(math.MaxInt64))
	long := must[*Tx](t)(c.StartLong())
	if n := c.ExpireTimedOut(); n != 0 {
		t.Fatalf("%d transactions expired at once", n)
	}
	if err := c.Commit(short); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(long); err != nil {
		t.Fatal(err)
	}
	// An ordinary one still times out.
	tx := must[*Tx](t)(c.StartShort(time.Second))
	clk.Advance(time.Minute)
	if n := c.ExpireTimedOut(); n != 1 {
		t.Fatalf("%d expired, want 1", n)
	}
	if err := c.Commit(tx); err == nil {
		t.Fatal("an expired transaction committed")
	}
}
