package badgerq

import (
	"context"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// Without Sync the writeback loop syncs the DB's files while producers
// commit, and parks while they do not until a commit wakes it; with Sync (the log syncs every
// commit) or a negative interval it does not run at all.
func TestWriteback(t *testing.T) {
	for _, c := range []struct {
		name     string
		opts     Options
		produces bool // syncs expected while producing
	}{
		{"no sync", Options{WritebackInterval: 5 * time.Millisecond}, true},
		{"sync", Options{Sync: true, WritebackInterval: 5 * time.Millisecond}, false},
		{"disabled", Options{WritebackInterval: -1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := badger.Open(TunedOptions(t.TempDir(), c.opts.Sync))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			bl, _ := tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: c.opts.Sync})
			coord, err := tx.Open(tx.Options{Log: bl})
			if err != nil {
				t.Fatal(err)
			}
			defer coord.Close()
			c.opts.Coordinator, c.opts.FastPath = coord, true
			be, err := Open(db, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			qs := queue.New(be)
			if err := qs.CreateQueue("q", queue.Config{}); err != nil {
				t.Fatal(err)
			}
			p, err := qs.Producer("q")
			if err != nil {
				t.Fatal(err)
			}
			ctx := coord.NewContext(p)
			produce := func() {
				if _, err := ctx.Start(time.Minute); err != nil {
					t.Fatal(err)
				}
				if err := p.Enqueue(context.Background(), queue.Event{Payload: make([]byte, 4096)}); err != nil {
					t.Fatal(err)
				}
				if err := ctx.Finish(); err != nil {
					t.Fatal(err)
				}
			}
			// Quiet: nothing produced, nothing synced.
			time.Sleep(30 * time.Millisecond)
			if n := be.wroteBack.Load(); n != 0 {
				t.Fatalf("%d writeback syncs before anything was produced", n)
			}
			deadline := time.Now().Add(10 * time.Second)
			for be.wroteBack.Load() == 0 && time.Now().Before(deadline) {
				produce()
				if !c.produces && time.Now().After(deadline.Add(-9800*time.Millisecond)) {
					break // 200 ms of commits is plenty to see a loop that should not run
				}
				time.Sleep(time.Millisecond)
			}
			if got := be.wroteBack.Load() > 0; got != c.produces {
				t.Fatalf("writeback synced: %v, want %v", got, c.produces)
			}
			if !c.produces {
				return
			}
			// Quiet again: the loop parks instead of ticking, and the
			// next commit wakes it for one more sync.
			for !be.writebackIdle.Load() {
				if time.Now().After(deadline) {
					t.Fatal("the writeback loop did not park while nothing was produced")
				}
				time.Sleep(time.Millisecond)
			}
			before := be.wroteBack.Load()
			time.Sleep(20 * time.Millisecond) // four intervals
			if n := be.wroteBack.Load(); n != before {
				t.Fatalf("%d writeback syncs while parked", n-before)
			}
			produce()
			for be.wroteBack.Load() == before {
				if time.Now().After(deadline) {
					t.Fatal("a commit did not wake the parked writeback loop")
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// Under load (not quiet) a due reclaim waits — only value-log GC runs — until
// a quiet tick or overdueFactor × ReclaimBytes freed.
func TestReclaimWaitsForQuiet(t *testing.T) {
	db, err := badger.Open(TunedOptions(t.TempDir(), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const step = 1 << 20
	be, err := Open(db, Options{ReclaimBytes: step, EvictInterval: -1, GCInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	check := func(what string, quiet bool, freed, wantAt int64) {
		t.Helper()
		be.freed.Store(freed)
		if err := be.reclaimNow(quiet); err != nil {
			t.Fatal(err)
		}
		if got := be.reclaimedAt.Load(); got != wantAt {
			t.Fatalf("%s: reclaimed up to %d, want %d", what, got, wantAt)
		}
	}
	check("not due", true, step/2, 0)
	check("due under load", false, 2*step, 0)
	check("due and quiet", true, 2*step, 2*step)
	check("due again under load", false, 3*step+step/2, 2*step)
	check("overdue under load", false, 2*step+overdueFactor*step, 2*step+overdueFactor*step)
}
