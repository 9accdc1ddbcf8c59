package tx

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// Snapshots leave out short transactions before their CanCommit (3926bea),
// so one that the snapshot caught between its check and its COMMITTING
// record would come back visible as committed, its persisted writes with
// it. Committers race snapshots here, each leaving its last transaction
// open (started, or past CanCommit); after a crash every one past CanCommit
// must be invisible and every acknowledged commit visible.
func TestSnapshotsRacingCanCommitKeepPersisted(t *testing.T) {
	for _, kind := range []string{"file-sync", "badger"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			bdb := openBadgerIf(t, kind == "badger", dir)
			open := func() *Coordinator {
				if kind == "badger" {
					l, err := NewBadgerLog(bdb, BadgerLogOptions{})
					if err != nil {
						t.Fatal(err)
					}
					return mustOpen(t, Options{Log: l})
				}
				return openFileCoord(t, dir, Options{})
			}
			c := open()
			type outcome struct {
				tx                         *Tx
				persisted, committed, open bool
			}
			const workers, rounds = 4, 150
			results := make([][]outcome, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					for i := range rounds {
						tx, err := c.StartShort(time.Hour)
						if err != nil {
							t.Error(err)
							return
						}
						last := i == rounds-1
						o := outcome{tx: tx, open: last}
						if !last || rng.IntN(2) == 0 {
							key := fmt.Appendf(nil, "k%d", rng.IntN(20))
							err := c.CanCommit(tx, [][]byte{key})
							o.persisted = err == nil
							if err != nil && !errors.Is(err, ErrConflict) {
								t.Error(err)
								return
							}
						}
						if !last {
							if o.persisted && rng.IntN(4) > 0 {
								if err := c.Commit(tx); err != nil {
									t.Error(err)
									return
								}
								o.committed = true
							} else if err := c.Abort(tx); err != nil {
								t.Error(err)
								return
							}
						}
						results[w] = append(results[w], o)
					}
				})
			}
			stop := make(chan struct{})
			snaps := make(chan int)
			go func() {
				n := 0
				defer func() { snaps <- n }()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if err := c.Snapshot(); err != nil {
						t.Error(err)
						return
					}
					n++
				}
			}()
			wg.Wait()
			close(stop)
			if n := <-snaps; n == 0 {
				t.Fatal("no snapshot taken while committers ran")
			}
			if err := c.Snapshot(); err != nil { // the open ones as they are left
				t.Fatal(err)
			}
			crash(c)
			c2 := open()
			defer c2.Close()
			r := must[*Tx](t)(c2.StartShort(time.Minute))
			for _, rs := range results {
				for _, o := range rs {
					visible := r.Visible(o.tx.ID)
					if o.committed && !visible {
						t.Errorf("committed tx %d invisible after recovery", o.tx.ID)
					}
					if o.open && o.persisted && visible {
						t.Errorf("tx %d, open past CanCommit, visible after recovery", o.tx.ID)
					}
				}
			}
		})
	}
}
