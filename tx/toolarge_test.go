package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A CanCommit whose COMMITTING edit the log refuses as too large (a batch
// over a FileLog segment) changes nothing, like every refused call. It used
// to leave the transaction marked committing with its keys held, so every
// overlapping transaction conflicted (Pending) until it ended.
func TestTooLargeCanCommitHoldsNothing(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			c, keys := tooLargeSetup(t, sync)
			big := must[*Tx](t)(c.StartShort(time.Minute))
			before := c.Stats()
			if err := c.CanCommit(big, keys); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("CanCommit of 1000 keys over a 4 KiB segment = %v, want ErrTooLarge", err)
			}
			if s := c.Stats(); s.ConflictKeys != before.ConflictKeys {
				t.Errorf("a refused CanCommit holds keys: %d -> %d", before.ConflictKeys, s.ConflictKeys)
			}
			if err := c.Commit(big); !errors.Is(err, ErrConflict) {
				t.Errorf("Commit after a refused CanCommit = %v, want it refused (ErrConflict) as after a conflict", err)
			}
			other := must[*Tx](t)(c.StartShort(time.Minute))
			if err := c.CanCommit(other, keys[:1]); err != nil {
				t.Fatalf("a key of a refused CanCommit stayed held: %v", err)
			}
			if err := c.Commit(other); err != nil {
				t.Fatal(err)
			}
			// The refused transaction is as it was: it can still CanCommit
			// what fits (and conflicts on what committed meanwhile).
			if err := c.CanCommit(big, keys[1:3]); err != nil {
				t.Fatalf("CanCommit that fits after a refused one: %v", err)
			}
			if err := c.Commit(big); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The same for a one-step commit whose staged writes Badger refuses as too
// large: its change keys are let go (they stayed held until it ended).
func TestTooLargeCommitWithHoldsNothing(t *testing.T) {
	db := openBadger(t, t.TempDir(), false)
	_, c := openSyncedLog(t, db)
	t.Cleanup(func() { c.Close() })
	huge := make([]Write, 100000) // small values stay in the LSM and count
	for i := range huge {
		huge[i] = Write{Key: binary.BigEndian.AppendUint64([]byte("k/"), uint64(i)), Value: make([]byte, 100)}
	}
	big := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.CommitWith(big, [][]byte{[]byte("key")}, huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized commit = %v, want ErrTooLarge", err)
	}
	other := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.CommitWith(other, [][]byte{[]byte("key")}, nil); err != nil {
		t.Fatalf("the key of a refused commit stayed held: %v", err)
	}
	if err := c.Abort(big); err != nil {
		t.Fatal(err)
	}
}

// A second CanCommit refused as too large holds again what the first one
// held: the transaction's COMMITTING edit names those keys and its
// participants may have persisted, so an overlapping transaction still
// conflicts (the rehold of 5bddbea, which nothing tested).
func TestTooLargeCanCommitKeepsEarlierKeys(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprintf("sync=%v", sync), func(t *testing.T) {
			c, keys := tooLargeSetup(t, sync)
			big := must[*Tx](t)(c.StartShort(time.Minute))
			if err := c.CanCommit(big, keys[:2]); err != nil {
				t.Fatal(err)
			}
			if err := c.CanCommit(big, keys); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("second CanCommit of 1000 keys over a 4 KiB segment = %v, want ErrTooLarge", err)
			}
			other := must[*Tx](t)(c.StartShort(time.Minute))
			var ce *ConflictError
			if err := c.CanCommit(other, keys[:1]); !errors.As(err, &ce) || !ce.Pending {
				t.Fatalf("CanCommit of a key the first CanCommit held = %v, want a pending conflict", err)
			}
			if err := c.CanCommit(other, keys[2:3]); err != nil {
				t.Fatalf("a key only the refused CanCommit named stayed held: %v", err)
			}
			if err := c.Commit(big); !errors.Is(err, ErrConflict) {
				t.Errorf("Commit after a refused CanCommit = %v, want it refused", err)
			}
		})
	}
}

// tooLargeSetup opens a coordinator on a FileLog of 4 KiB segments and
// returns 1000 change keys, whose COMMITTING edit the log refuses.
func tooLargeSetup(t *testing.T, sync bool) (*Coordinator, [][]byte) {
	l, err := OpenFileLog(t.TempDir(), FileLogOptions{SegmentSize: 4096, Sync: sync})
	if err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, Options{Log: l})
	var keys [][]byte
	for i := range 1000 {
		keys = append(keys, []byte(fmt.Sprint("k", i)))
	}
	return c, keys
}
