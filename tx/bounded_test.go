package tx

import (
	"testing"
	"time"
)

// TestInvalidListStaysBounded runs 1M transactions of which 10% time out. A
// participant that cleans up the data of invalid transactions reports its
// prune bound every reportEvery transactions, lagging one interval behind.
// The invalid list must never exceed the documented bound:
// timeouts per report interval x 2 (the lag) + one sweep's worth.
func TestInvalidListStaysBounded(t *testing.T) {
	const (
		total       = 1_000_000
		reportEvery = 10_000
		sweepEvery  = 1_000
	)
	clk := newFakeClock()
	c := mustOpen(t, Options{Now: clk.Now})
	pruner := c.RegisterPruner("cleaner")
	var lagging uint64 // the bound the participant has cleaned up to
	maxInvalid, timedOut := 0, 0
	for i := 1; i <= total; i++ {
		tx, err := c.StartShort(time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			timedOut++ // abandoned: it will time out
		} else if err := c.Commit(tx); err != nil {
			t.Fatal(err)
		}
		if i%sweepEvery == 0 {
			clk.Advance(2 * time.Second)
			c.ExpireTimedOut()
		}
		if i%reportEvery == 0 {
			pruner.Report(lagging)
			lagging = tx.ID // next time, everything up to here is cleaned
		}
		if n := len(c.invalid.ids); n > maxInvalid {
			maxInvalid = n
		}
	}
	s := c.Stats()
	bound := 2*reportEvery/10 + sweepEvery/10
	t.Logf("1M transactions, %d timed out: invalid list peaked at %d (bound %d), ends at %d; %d conflict keys kept",
		s.TimedOut, maxInvalid, bound, s.Invalid, s.ConflictKeys)
	if int(s.TimedOut) != timedOut {
		t.Fatalf("timed out %d, want %d", s.TimedOut, timedOut)
	}
	if maxInvalid > bound {
		t.Fatalf("invalid list reached %d, over the bound %d", maxInvalid, bound)
	}
	if maxInvalid == 0 {
		t.Fatal("the test must actually fill the invalid list")
	}
}
