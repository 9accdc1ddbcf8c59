package tx

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The gathering counts (the coordinator's siblings, the log's writes in
// flight) return to zero once every transaction has ended, whatever path
// each took: a count left above zero would make every later gather wait out
// its limit, one below zero would hide siblings.
func TestSiblingCountsSettle(t *testing.T) {
	db := openBadger(t, t.TempDir(), false)
	t.Cleanup(func() { db.Close() })
	l, err := NewBadgerLog(db, BadgerLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	c := mustOpen(t, Options{Log: l, Now: clock.Now})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(7, uint64(g)))
			huge := []Write{{Key: nil, Value: []byte("v")}}
			for i := range 200 {
				key := [][]byte{[]byte(fmt.Sprint(rng.IntN(4)))}
				w := []Write{{Key: []byte(fmt.Sprintf("k/%d/%d", g, i)), Value: []byte("v")}}
				tx, err := c.StartShort(time.Second)
				if err != nil {
					t.Error(err)
					return
				}
				switch rng.IntN(9) {
				case 0:
					c.CommitWith(tx, key, w)
				case 1:
					if p, err := c.CommitWithDeferred(tx, key, w); err == nil && rng.IntN(2) == 0 {
						p.Wait()
					}
				case 2: // two-phase
					if c.CanCommit(tx, key) == nil {
						c.Commit(tx)
					}
				case 3:
					c.Abort(tx)
				case 4: // refused write, then aborted
					c.CommitWith(tx, key, huge)
					c.Abort(tx)
				case 5: // a checkpoint of a short transaction, then a commit
					if next, err := c.Checkpoint(tx); err == nil {
						c.CommitWith(next, key, w)
					}
				case 6: // times out
					clock.Advance(2 * time.Second)
					c.ExpireTimedOut()
				case 7: // refused CanCommit (conflict) then aborted
					if c.CanCommit(tx, key) != nil {
						c.Abort(tx)
					} else {
						c.Invalidate(tx)
					}
				case 8: // timed out at commit
					clock.Advance(2 * time.Second)
					c.CommitWith(tx, key, w)
				}
				c.Abort(tx) // whatever is left
			}
		}()
	}
	wg.Wait()
	c.ExpireTimedOut()
	if n := len(c.InProgress()); n != 0 {
		t.Fatalf("%d transactions left in progress", n)
	}
	if s, w := c.siblings.Load(), l.writing.Load(); s != 0 || w != 0 {
		t.Fatalf("with nothing in progress: %d siblings, %d writes in flight; want 0", s, w)
	}
}
