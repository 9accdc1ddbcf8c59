package tx

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// A Pruner's report (or Unregister) after Close, as a participant's
// background compaction may make while the app shuts down, is use after
// Close: it changes nothing, and the coordinator keeps answering ErrClosed.
// It pruned the invalid list of the closed coordinator and wrote its PRUNE
// to the closed log, whose refusal stopped the coordinator as a log failure:
// every later call answered ErrLogFailed.
func TestPruneAfterCloseChangesNothing(t *testing.T) {
	for _, unregister := range []bool{false, true} {
		c := openFileCoord(t, t.TempDir(), Options{})
		p := c.RegisterPruner("participant")
		holding := c.RegisterPruner("holding") // reports nothing: holds pruning at 0
		tx := must[*Tx](t)(c.StartShort(time.Minute))
		if err := c.Invalidate(tx); err != nil {
			t.Fatal(err)
		}
		p.Report(NoInvalidData)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if unregister {
			holding.Unregister()
		} else {
			holding.Report(NoInvalidData)
		}
		if got := c.InvalidList(); !slices.Equal(got, []uint64{tx.ID}) {
			t.Errorf("unregister=%v: invalid list %v after Close, want [%d]", unregister, got, tx.ID)
		}
		if _, err := c.StartShort(time.Minute); !errors.Is(err, ErrClosed) {
			t.Errorf("unregister=%v: start after Close and a prune = %v, want ErrClosed", unregister, err)
		}
	}
}
