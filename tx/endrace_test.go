package tx

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// Commits racing aborts, invalidations and timeouts of the same transactions
// end each exactly once: a commit that returned nil is visible and not
// invalid, an abort or invalidation that returned nil means the commit
// failed, and the counters add up.
func TestEndingRacesCommit(t *testing.T) {
	for _, mode := range []string{"badger", "file-sync", "memory"} {
		t.Run(mode, func(t *testing.T) {
			clock := newFakeClock()
			o := Options{Now: clock.Now}
			switch mode {
			case "badger":
				db := openBadger(t, t.TempDir(), false)
				t.Cleanup(func() { db.Close() })
				l, err := NewBadgerLog(db, BadgerLogOptions{Sync: true})
				if err != nil {
					t.Fatal(err)
				}
				o.Log = l
			case "file-sync":
				l, err := OpenFileLog(t.TempDir(), FileLogOptions{Sync: true})
				if err != nil {
					t.Fatal(err)
				}
				o.Log = l
			}
			c := mustOpen(t, o)
			const n = 300
			txs := make([]*Tx, n)
			for i := range txs {
				txs[i] = must[*Tx](t)(c.StartShort(time.Minute))
			}
			committed := make([]error, n) // nil: committed
			ended := make([]error, n)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i, tx := range txs {
					if i%2 == 0 {
						committed[i] = c.CommitWith(tx, [][]byte{[]byte(fmt.Sprint(i))}, nil)
					} else if committed[i] = c.CanCommit(tx, [][]byte{[]byte(fmt.Sprint(i))}); committed[i] == nil {
						committed[i] = c.Commit(tx)
					}
				}
			}()
			go func() {
				defer wg.Done()
				for i, tx := range txs {
					switch i % 3 {
					case 0:
						ended[i] = c.Abort(tx)
					case 1:
						ended[i] = c.Invalidate(tx)
					case 2:
						if i%9 == 2 {
							clock.Advance(2 * time.Minute) // every transaction left times out
							c.ExpireTimedOut()
						}
						ended[i] = errors.New("not ended here")
					}
				}
			}()
			wg.Wait()
			c.ExpireTimedOut()
			later := must[*Tx](t)(c.StartShort(time.Minute))
			invalid := c.InvalidList()
			for i, tx := range txs {
				ok, gone := committed[i] == nil, ended[i] == nil
				if ok && gone {
					t.Errorf("tx %d: committed and also ended by abort/invalidate", tx.ID)
				}
				if ok && (!later.Visible(tx.ID) || slices.Contains(invalid, tx.ID)) {
					t.Errorf("tx %d: committed, but invisible to a later transaction or invalid", tx.ID)
				}
				// An aborted one is visible (it rolled back: nothing to see);
				// an invalidated or timed-out one is not.
				if !ok && i%3 != 0 && !slices.Contains(invalid, tx.ID) {
					t.Errorf("tx %d: neither committed (%v) nor invalid", tx.ID, committed[i])
				}
			}
			checkStatsAddUp(t, c, mode)
			if s := c.Stats(); s.InProgress != 1 {
				t.Errorf("%d in progress, want only the last one", s.InProgress)
			}
		})
	}
}
