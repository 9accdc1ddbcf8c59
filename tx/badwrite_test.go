package tx

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// A staged write that Badger refuses before its commit (an empty or reserved
// key, a key over 65000 bytes) writes nothing, so it fails that commit only
// (ErrBadWrite; the transaction stays in progress, to abort) and keeps the
// other transactions' unwaited edits. It used to stop the coordinator for
// good (ErrLogFailed, "outcome unknown"): one step staging a bad state key
// stopped the whole app.
func TestBadStagedWriteRefusedWhole(t *testing.T) {
	for name, w := range map[string]Write{
		"empty key":    {Key: nil, Value: []byte("v")},
		"huge key":     {Key: make([]byte, 70000), Value: []byte("v")},
		"reserved key": {Key: []byte("!badger!x"), Value: []byte("v")},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db := openBadger(t, dir, false)
			l, c := openSyncedLog(t, db)
			t.Cleanup(func() { c.Close() })
			// A long transaction's START and INVALID edits wait, unwaited,
			// for the next write: the refused one.
			logged := must[*Tx](t)(c.StartLong())
			if err := c.Abort(logged); err != nil {
				t.Fatal(err)
			}
			bad := must[*Tx](t)(c.StartShort(time.Minute))
			err := c.CommitWith(bad, [][]byte{[]byte("k")}, []Write{{Key: []byte("ok"), Value: []byte("v")}, w})
			if !errors.Is(err, ErrBadWrite) || errors.Is(err, ErrLogFailed) {
				t.Fatalf("CommitWith of a bad write = %v, want ErrBadWrite", err)
			}
			if !slices.Contains(c.InProgress(), bad.ID) {
				t.Fatal("the refused transaction is no longer in progress")
			}
			if err := c.Abort(bad); err != nil {
				t.Fatalf("abort after the refused write: %v", err)
			}
			next := must[*Tx](t)(c.StartShort(time.Minute))
			if err := c.CommitWith(next, [][]byte{[]byte("k")}, []Write{{Key: []byte("ok"), Value: []byte("v2")}}); err != nil {
				t.Fatalf("the coordinator stopped after a refused write: %v", err)
			}
			_, edits, err := l.Recover()
			if err != nil {
				t.Fatal(err)
			}
			invalid := false
			for _, e := range edits {
				if e.TxID == bad.ID && e.Kind == EditCommitted {
					t.Fatalf("the refused commit is in the log: %+v", e)
				}
				invalid = invalid || e.TxID == logged.ID && e.Kind == EditInvalid
			}
			if !invalid {
				t.Fatalf("another transaction's unwaited edit was lost: %+v", edits)
			}
		})
	}
}
