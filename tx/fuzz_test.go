package tx

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the edit and snapshot decoders and to
// a FileLog's recovery: corrupt input must give ErrCorrupt or be cut as a torn
// tail, never a panic or a huge allocation.
//
//	go test -run '^$' -fuzz FuzzDecode -fuzztime 60s ./tx/
func FuzzDecode(f *testing.F) {
	var edits []byte
	for _, e := range []Edit{
		{Kind: EditReserve, Pointer: 1 << 20},
		{Kind: EditStart, TxID: 7, TxKind: Short, Expires: 12345},
		{Kind: EditCommitting, TxID: 7, Keys: []uint64{1, 2, 3}},
		{Kind: EditCommitted, TxID: 7, Pointers: []uint64{7, 9}},
		{Kind: EditInvalid, TxID: 8, Pointers: []uint64{8}},
		{Kind: EditPrune, Pointer: 9},
	} {
		edits = appendEdit(edits, &e)
	}
	f.Add(edits)
	f.Add(encodeState(&State{NextPointer: 10, ReadPointer: 9, Invalid: []uint64{3},
		InProgress: []InProgressTx{{ID: 5, Kind: Long, Pointers: []uint64{6}, Committing: true, Keys: []uint64{42}},
			{ID: 7, Kind: Short, Committing: true, Refused: true}},
		Committed: []CommittedKey{{Key: 1, Pointer: 2}}}))
	f.Add(appendFrame(nil, edits))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		decodeEdits(b, nil)
		decodeState(b)
		nextFrame(b)
		// As the only segment of a log: recovery never panics, and a
		// coordinator opened on whatever it recovered works.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "wal-0000000000000001.log"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := OpenFileLog(dir, FileLogOptions{SegmentSize: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Open(Options{Log: l, ExpiryInterval: -1})
		if err != nil {
			return // ErrCorrupt and the like are fine
		}
		defer c.Close()
		tx, err := c.StartShort(1e9)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Commit(tx); err != nil {
			t.Fatal(err)
		}
	})
}
