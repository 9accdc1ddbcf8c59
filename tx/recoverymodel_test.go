package tx

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// TestRecoveryModel runs random single-goroutine histories (starts, CanCommit,
// commits one- and two-step, aborts, invalidations, checkpoints, timeouts,
// snapshots, restarts after a crash) against a model of what recovery must
// keep, on both logs: every acknowledged commit visible to every later
// transaction, every pointer of an invalidated or possibly persisted,
// unfinished transaction invisible, pointers never reused, and recovered
// conflicts never missed.
func TestRecoveryModel(t *testing.T) {
	for _, kind := range []string{"file-sync", "file-nosync", "badger"} {
		for seed := uint64(1); seed <= 12; seed++ {
			t.Run(fmt.Sprintf("%s/%d", kind, seed), func(t *testing.T) {
				runRecoveryModel(t, kind, seed)
			})
		}
	}
}

type modelTx struct {
	tx        *Tx
	committed bool
	ended     bool // aborted, invalidated, timed out or committed
	persisted bool // may have data: CanCommit passed or a checkpoint taken
	keys      [][]byte
	held      bool // keys held by a CanCommit that passed
	started   int  // commits before it started
}

func runRecoveryModel(t *testing.T, kind string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	clk := newFakeClock()
	dir := t.TempDir()
	bdb := openBadgerIf(t, kind == "badger", dir)
	open := func() *Coordinator {
		var l Log
		var err error
		switch kind {
		case "file-sync", "file-nosync":
			l, err = OpenFileLog(dir, FileLogOptions{Sync: kind == "file-sync", SegmentSize: 2048})
		case "badger":
			l, err = NewBadgerLog(bdb, BadgerLogOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		c, err := Open(Options{Log: l, ExpiryInterval: -1, Now: clk.Now, ReserveBlock: 8, SnapshotEvery: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := open()
	var all []*modelTx
	var maxPointer uint64
	commits := 0
	lastCommit := map[byte]int{} // key -> commits when it last committed
	committedNow := func(m *modelTx) {
		t.Helper()
		for _, k := range m.keys {
			if lastCommit[k[0]] > m.started {
				t.Fatalf("tx %d committed key %d, which a commit after its start changed too", m.tx.ID, k[0])
			}
		}
		commits++
		for _, k := range m.keys {
			lastCommit[k[0]] = commits
		}
		m.committed, m.ended = true, true
	}
	live := func() []*modelTx {
		var out []*modelTx
		for _, m := range all {
			if !m.ended {
				out = append(out, m)
			}
		}
		return out
	}
	key := func() []byte { return []byte{byte(rng.IntN(6))} }
	check := func(when string) {
		t.Helper()
		r, err := c.StartShort(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if r.ID <= maxPointer {
			t.Fatalf("%s: pointer %d handed out again (max before %d)", when, r.ID, maxPointer)
		}
		maxPointer = r.ID
		for _, m := range all {
			for _, p := range m.tx.AllWritePointers() {
				switch {
				case m.committed && !r.Visible(p):
					t.Fatalf("%s: committed pointer %d of tx %d invisible", when, p, m.tx.ID)
				case !m.committed && m.persisted && r.Visible(p):
					t.Fatalf("%s: pointer %d of unfinished or invalid tx %d visible", when, p, m.tx.ID)
				}
			}
		}
		if err := c.Abort(r); err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; step < 300; step++ {
		lv := live()
		pick := func() *modelTx {
			if len(lv) == 0 {
				return nil
			}
			return lv[rng.IntN(len(lv))]
		}
		switch op := rng.IntN(100); {
		case op < 20:
			var tx *Tx
			var err error
			if rng.IntN(5) == 0 {
				tx, err = c.StartLong()
			} else {
				tx, err = c.StartShort(time.Duration(1+rng.IntN(10)) * time.Second)
			}
			if err != nil {
				t.Fatal(err)
			}
			maxPointer = max(maxPointer, tx.ID)
			all = append(all, &modelTx{tx: tx, started: commits})
		case op < 35: // CanCommit
			if m := pick(); m != nil {
				m.keys = [][]byte{key(), key()}
				err := c.CanCommit(m.tx, m.keys)
				switch {
				case err == nil:
					m.persisted, m.held = true, true
				case errors.Is(err, ErrConflict):
					m.held = false // holds nothing now (not even an earlier CanCommit's keys)
				case errors.Is(err, ErrNotInProgress):
					m.ended = true
				default:
					t.Fatal(err)
				}
			}
		case op < 50: // Commit (after CanCommit) or one-step CommitWith
			if m := pick(); m != nil {
				var err error
				if m.held && rng.IntN(2) == 0 {
					err = c.Commit(m.tx)
				} else {
					m.keys = [][]byte{key()}
					err = c.CommitWith(m.tx, m.keys, nil)
					m.held = false // released, or held by the commit
				}
				switch {
				case err == nil:
					committedNow(m)
				case errors.Is(err, ErrConflict):
				case errors.Is(err, ErrNotInProgress):
					m.ended = true
				default:
					t.Fatal(err)
				}
			}
		case op < 58:
			if m := pick(); m != nil {
				err := c.Abort(m.tx)
				if err != nil && !errors.Is(err, ErrNotInProgress) {
					t.Fatal(err)
				}
				if err == nil && m.tx.Kind == Short {
					m.persisted = false // rolled back: nothing left to hide
				}
				m.ended = true
			}
		case op < 63:
			if m := pick(); m != nil {
				if err := c.Invalidate(m.tx); err != nil && !errors.Is(err, ErrNotInProgress) {
					t.Fatal(err)
				}
				m.ended = true
			}
		case op < 70:
			if m := pick(); m != nil {
				next, err := c.Checkpoint(m.tx)
				switch {
				case err == nil:
					m.tx, m.persisted = next, true
					maxPointer = max(maxPointer, next.WritePointer)
				case errors.Is(err, ErrNotInProgress):
					m.ended = true
				default:
					t.Fatal(err)
				}
			}
		case op < 78:
			clk.Advance(time.Duration(rng.IntN(3000)) * time.Millisecond)
			c.ExpireTimedOut()
			for _, m := range lv {
				if !m.committed && !containsID(c.InProgress(), m.tx.ID) {
					m.ended = true
				}
			}
		case op < 84:
			if err := c.Snapshot(); err != nil {
				t.Fatal(err)
			}
		case op < 92:
			crash(c)
			c = open()
			// Whatever the new coordinator does not know is over: it
			// persisted nothing (else it would be in the log).
			ip := c.InProgress()
			for _, m := range lv {
				if !containsID(ip, m.tx.ID) {
					if m.persisted && !containsID(c.InvalidList(), m.tx.ID) {
						t.Fatalf("tx %d, past CanCommit or a checkpoint, neither in progress nor invalid after recovery", m.tx.ID)
					}
					m.ended = true
				}
			}
			check("after recovery")
		default:
			check("live")
		}
	}
	crash(c)
	c = open()
	check("final")
	c.Close()
}

func containsID(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func openBadgerIf(t *testing.T, yes bool, dir string) *badger.DB {
	if !yes {
		return nil
	}
	db := openBadger(t, dir, false)
	t.Cleanup(func() { db.Close() })
	return db
}
