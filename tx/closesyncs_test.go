package tx

import (
	"testing"
)

// Stats.LogSyncs counts group syncs for commits, not the syncs Close runs
// to flush what is left (unwaited edits, deferred commits nobody waited
// for), as its doc says: Close's counted, so Committed ÷ LogSyncs read after
// a run came out low and the syncs metric rose at every shutdown.
func TestLogSyncsLeaveOutClose(t *testing.T) {
	t.Run("BadgerLog", func(t *testing.T) {
		h := newSyncHeld(t)
		h.start(t)
		h.tb.Put("a", 1)
		p, err := h.ctx.FinishDeferred() // left for Close to sync
		if err != nil {
			t.Fatal(err)
		}
		must[*Tx](t)(h.c.StartLong()) // its START is pending: Close writes it
		closeKeepsLogSyncs(t, h.c)
		if err := p.Wait(); err != nil {
			t.Fatalf("the deferred commit Close synced: %v", err)
		}
	})
	t.Run("FileLog", func(t *testing.T) {
		c := openFileCoord(t, t.TempDir(), Options{})
		must[*Tx](t)(c.StartShort(1e9)) // reserves pointers: a counted sync
		must[*Tx](t)(c.StartLong())     // its START is pending: Close writes it
		closeKeepsLogSyncs(t, c)
	})
}

func closeKeepsLogSyncs(t *testing.T, c *Coordinator) {
	t.Helper()
	before := c.Stats().LogSyncs
	if before == 0 {
		t.Fatal("no log sync counted before Close")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if after := c.Stats().LogSyncs; after != before {
		t.Fatalf("LogSyncs %d before Close, %d after: Close's syncs counted", before, after)
	}
}
