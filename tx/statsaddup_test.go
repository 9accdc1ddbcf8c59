package tx

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// checkStatsAddUp fails unless every transaction started is committed,
// aborted, invalidated or still in progress.
func checkStatsAddUp(t *testing.T, c *Coordinator, where string) {
	t.Helper()
	s := c.Stats()
	if s.Started != s.Committed+s.Aborted+s.Invalidated+uint64(s.InProgress) {
		t.Errorf("%s: started %d != committed %d + aborted %d + invalidated %d + in progress %d", where, s.Started, s.Committed, s.Aborted, s.Invalidated, s.InProgress)
	}
	if s.TimedOut > s.Invalidated || s.Deferred > s.Committed {
		t.Errorf("%s: timed out %d of invalidated %d, deferred %d of committed %d", where, s.TimedOut, s.Invalidated, s.Deferred, s.Committed)
	}
}

// The counters add up on every path — commits (both paths, deferred),
// conflicts, aborts, failed rollbacks, long transactions, timeouts — and
// across a restart with transactions left in progress: those count as
// started at Open (they end there or later), which they did not, so
// Invalidated exceeded Started after EndRecoveredTransactions.
func TestStatsAddUp(t *testing.T) {
	dir := t.TempDir()
	for round, end := range []bool{false, false, true} {
		db := openBadger(t, dir, false)
		l, err := NewBadgerLog(db, BadgerLogOptions{Sync: true})
		if err != nil {
			t.Fatal(err)
		}
		clock := newFakeClock()
		c, err := Open(Options{Log: l, Now: clock.Now, ExpiryInterval: -1, EndRecoveredTransactions: end})
		if err != nil {
			t.Fatal(err)
		}
		checkStatsAddUp(t, c, fmt.Sprintf("round %d: after Open", round))
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				fast := c.NewContext(stagedTable{newTable(db, fmt.Sprintf("f%d/", g))})
				slow := &recorder{}
				general := c.NewContext(slow)
				for i := range 150 {
					key := fmt.Sprint(rng.IntN(8))
					switch rng.IntN(9) {
					case 0, 1: // fast path, maybe deferred
						if _, err := fast.Start(time.Minute); err != nil {
							continue
						}
						fast.parts[0].(stagedTable).Put(key, int64(i))
						if rng.IntN(2) == 0 {
							fast.Finish()
						} else if p, err := fast.FinishDeferred(); err == nil {
							p.Wait()
						}
					case 2, 3: // general path: conflicts, failed persists and rollbacks
						slow.keys = [][]byte{[]byte(key)}
						slow.failPersist = rng.IntN(4) == 0
						slow.failRollback = rng.IntN(4) == 0
						if _, err := general.Start(time.Minute); err == nil {
							general.Finish()
						}
					case 4:
						if _, err := general.Start(time.Minute); err == nil {
							general.Abort(nil)
						}
					case 5: // long, a checkpoint, then commit or abort
						tx, err := c.StartLong()
						if err != nil {
							continue
						}
						if tx, err = c.Checkpoint(tx); err != nil {
							continue
						}
						if rng.IntN(2) == 0 {
							c.CommitWith(tx, [][]byte{[]byte(key)}, nil)
						} else {
							c.Abort(tx)
						}
					case 6: // left to time out
						c.StartShort(time.Second)
					case 7:
						clock.Advance(time.Second + time.Nanosecond)
						c.ExpireTimedOut()
					case 8: // left in progress, for the restart
						if rng.IntN(4) == 0 {
							tx, err := c.StartShort(time.Hour)
							if err == nil && rng.IntN(2) == 0 {
								c.CanCommit(tx, [][]byte{[]byte("left" + key)})
							}
						}
					}
					if i%50 == 0 {
						checkStatsAddUp(t, c, fmt.Sprintf("round %d", round))
					}
				}
			}()
		}
		wg.Wait()
		checkStatsAddUp(t, c, fmt.Sprintf("round %d: before Close", round))
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
}
