package tx

import (
	"sync"
	"testing"
	"time"
)

// Edits that wait for the next waited append (STARTs of long transactions,
// INVALIDs of a sweep, ABORTs) pile up in the FileLog's pending buffer, as do
// the batches of committers queued behind a sync. Each batch fits a segment;
// together they may not, and the log must still write them (in several
// frames) instead of failing for good.
func TestFileLogPendingOverSegment(t *testing.T) {
	for _, sync := range []bool{false, true} {
		dir := t.TempDir()
		l, err := OpenFileLog(dir, FileLogOptions{Sync: sync, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		clk := newFakeClock()
		c, err := Open(Options{Log: l, ExpiryInterval: -1, Now: clk.Now, SnapshotEvery: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		var longs []*Tx
		for i := 0; i < 400; i++ { // ~20 bytes of START each, unwaited
			longs = append(longs, must[*Tx](t)(c.StartLong()))
		}
		last := commitN(t, c, 1)
		// And a sweep's worth of INVALIDs (logged transactions: past CanCommit).
		for i := 0; i < 300; i++ {
			tx := must[*Tx](t)(c.StartShort(time.Second))
			if err := c.CanCommit(tx, nil); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute)
		if n := c.ExpireTimedOut(); n != 300 {
			t.Fatalf("expired %d", n)
		}
		last = commitN(t, c, 1)
		crash(c)
		l2, err := OpenFileLog(dir, FileLogOptions{Sync: sync, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Open(Options{Log: l2, ExpiryInterval: -1, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		if rp := c2.ReadPointer(); rp != last.ID {
			t.Errorf("sync=%v: read pointer %d, want %d", sync, rp, last.ID)
		}
		if n := len(c2.InProgress()); n != len(longs) {
			t.Errorf("sync=%v: %d in progress, want the %d long ones", sync, n, len(longs))
		}
		if n := len(c2.InvalidList()); n != 300 {
			t.Errorf("sync=%v: %d invalid, want 300", sync, n)
		}
		c2.Close()
	}
}

// Committers queued behind a sync: their batches are written together.
func TestFileLogGroupOverSegment(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenFileLog(dir, FileLogOptions{Sync: true, SegmentSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Log: l, ExpiryInterval: -1, SnapshotEvery: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys := make([][]byte, 100) // ~800 bytes of COMMITTING per transaction
			for i := 0; i < 50; i++ {
				for k := range keys {
					keys[k] = []byte{byte(g), byte(i), byte(k)}
				}
				tx, err := c.StartShort(time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if err := c.CanCommit(tx, keys); err != nil {
					errs <- err
					return
				}
				if err := c.Commit(tx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
