package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func openFileCoord(t *testing.T, dir string, o Options) *Coordinator {
	t.Helper()
	l, err := OpenFileLog(dir, FileLogOptions{Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	o.Log = l
	if o.ExpiryInterval == 0 {
		o.ExpiryInterval = -1
	}
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// crash abandons a coordinator without Close, as kill -9 would: whatever a
// waited append wrote is in the files; nothing else is flushed.
func crash(c *Coordinator) {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.done.Wait()
	if fl, ok := c.log.(*FileLog); ok && fl.seg != nil {
		fl.seg.close() // unmapping keeps what was copied, as the OS does for a killed process
	}
}

type scene struct {
	committed, inProgress, committing, invalid *Tx
	// forgotten never reached CanCommit: the log never heard of it.
	forgotten  *Tx
	rp         uint64
	maxPointer uint64
}

// buildScene leaves a coordinator with one of each kind of transaction.
func buildScene(t *testing.T, c *Coordinator, clk *fakeClock) scene {
	start := must[*Tx](t)
	var s scene
	s.committed = start(c.StartShort(time.Minute))
	if err := c.CanCommit(s.committed, [][]byte{[]byte("k1")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(s.committed); err != nil {
		t.Fatal(err)
	}
	s.invalid = start(c.StartShort(time.Minute))
	if err := c.Invalidate(s.invalid); err != nil {
		t.Fatal(err)
	}
	// Long: logged from its start (a short one only from CanCommit).
	s.inProgress = start(c.StartLong())
	s.forgotten = start(c.StartShort(time.Hour))
	s.committing = start(c.StartShort(time.Hour))
	if err := c.CanCommit(s.committing, [][]byte{[]byte("k2")}); err != nil {
		t.Fatal(err)
	}
	// A commit carries the unwaited edits before it to disk.
	last := start(c.StartShort(time.Minute))
	if err := c.CanCommit(last, [][]byte{[]byte("k3")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(last); err != nil {
		t.Fatal(err)
	}
	s.rp = c.ReadPointer()
	s.maxPointer = last.ID
	return s
}

// checkScene checks a coordinator recovered from buildScene's log, or from
// a snapshot taken after it (which leaves forgotten out as the log does).
func checkScene(t *testing.T, c *Coordinator, s scene) {
	t.Helper()
	if rp := c.ReadPointer(); rp != s.rp {
		t.Errorf("read pointer = %d, want %d", rp, s.rp)
	}
	if got := c.InvalidList(); !slices.Equal(got, []uint64{s.invalid.ID}) {
		t.Errorf("invalid = %v, want [%d]", got, s.invalid.ID)
	}
	want := []uint64{s.inProgress.ID, s.committing.ID}
	if got := c.InProgress(); !slices.Equal(got, want) {
		t.Errorf("in progress = %v, want %v", got, want)
	}
	// It had persisted nothing (participants persist after CanCommit), so
	// forgetting it is safe; its client learns at its next call.
	if err := c.CanCommit(s.forgotten, nil); !errors.Is(err, ErrNotInProgress) {
		t.Errorf("CanCommit of a transaction the log never heard of = %v, want ErrNotInProgress", err)
	}
	tx := must[*Tx](t)(c.StartShort(time.Minute))
	if tx.ID <= s.maxPointer {
		t.Errorf("pointer went back: %d <= %d", tx.ID, s.maxPointer)
	}
	if !tx.Visible(s.committed.ID) || tx.Visible(s.invalid.ID) || tx.Visible(s.inProgress.ID) {
		t.Error("visibility after recovery is wrong")
	}
	c.Abort(tx)
	// A recovered transaction can still finish, and conflicts conservatively.
	// k3 committed after s.inProgress started.
	if err := c.CanCommit(s.inProgress, [][]byte{[]byte("k3")}); !errors.Is(err, ErrConflict) {
		t.Errorf("recovered tx vs recovered commit = %v, want ErrConflict", err)
	}
	// What committed before the crash is not kept: any key conflicts, even
	// one nobody wrote; no key at all cannot.
	if err := c.CanCommit(s.inProgress, [][]byte{[]byte("never-written")}); !errors.Is(err, ErrConflict) {
		t.Errorf("recovered tx, unknown key = %v, want ErrConflict", err)
	}
	if err := c.CanCommit(s.inProgress, nil); err != nil {
		t.Errorf("recovered tx without keys: %v", err)
	}
	// A recovered committing transaction keeps its own keys, and no others.
	if err := c.CanCommit(s.committing, [][]byte{[]byte("k2"), []byte("k4")}); !errors.Is(err, ErrConflict) {
		t.Errorf("recovered committing tx, a new key = %v, want ErrConflict", err)
	}
	if err := c.CanCommit(s.committing, [][]byte{[]byte("k2")}); err != nil {
		t.Errorf("recovered committing tx, its own key: %v", err)
	}
	// New transactions conflict with its held key until it commits.
	fresh := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.CanCommit(fresh, [][]byte{[]byte("k2")}); !errors.Is(err, ErrConflict) {
		t.Errorf("new tx vs recovered holder = %v, want ErrConflict", err)
	}
	c.Abort(fresh)
	if err := c.Commit(s.committing); err != nil {
		t.Errorf("recovered committing tx: %v", err)
	}
}

func TestRecoveryFromLog(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	c := openFileCoord(t, dir, Options{Now: clk.Now})
	s := buildScene(t, c, clk)
	crash(c)
	c2 := openFileCoord(t, dir, Options{Now: clk.Now})
	defer c2.Close()
	checkScene(t, c2, s)
}

func TestRecoveryFromSnapshotAndLog(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	c := openFileCoord(t, dir, Options{Now: clk.Now})
	s := buildScene(t, c, clk)
	if err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// More work after the snapshot, replayed from the new segment.
	tx := must[*Tx](t)(c.StartShort(time.Minute))
	if err := c.Commit(tx); err != nil {
		t.Fatal(err)
	}
	s.rp, s.maxPointer = tx.ID, tx.ID
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.bin"))
	if len(segs) != 1 || len(snaps) != 1 {
		t.Fatalf("after a snapshot the covered log is dropped: segments %v snapshots %v", segs, snaps)
	}
	crash(c)
	c2 := openFileCoord(t, dir, Options{Now: clk.Now})
	defer c2.Close()
	checkScene(t, c2, s)

	// Recovered in-progress transactions still expire.
	clk.Advance(25 * time.Hour)
	c2.ExpireTimedOut()
	if len(c2.InProgress()) != 0 || !slices.Contains(c2.InvalidList(), s.inProgress.ID) {
		t.Errorf("in progress %v invalid %v", c2.InProgress(), c2.InvalidList())
	}
}

func TestEndRecoveredTransactions(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	c := openFileCoord(t, dir, Options{Now: clk.Now})
	s := buildScene(t, c, clk)
	crash(c)
	c2 := openFileCoord(t, dir, Options{Now: clk.Now, EndRecoveredTransactions: true})
	defer c2.Close()
	if len(c2.InProgress()) != 0 {
		t.Fatalf("in progress after recovery: %v", c2.InProgress())
	}
	want := []uint64{s.invalid.ID, s.inProgress.ID, s.committing.ID}
	if got := c2.InvalidList(); !slices.Equal(got, want) {
		t.Fatalf("invalid = %v, want %v", got, want)
	}
	// The committing transaction no longer holds its keys.
	tx := must[*Tx](t)(c2.StartShort(time.Minute))
	if err := c2.CanCommit(tx, [][]byte{[]byte("k2")}); err != nil {
		t.Fatal(err)
	}
	if err := c2.Commit(s.committing); !errors.Is(err, ErrNotInProgress) {
		t.Fatalf("commit of an ended transaction = %v", err)
	}
}

func TestAutomaticSnapshots(t *testing.T) {
	dir := t.TempDir()
	c := openFileCoord(t, dir, Options{SnapshotEvery: 50})
	var last *Tx
	for i := 0; i < 500; i++ {
		last = must[*Tx](t)(c.StartShort(time.Minute))
		if err := c.Commit(last); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	if len(segs) > 3 {
		t.Errorf("log not truncated: %d segments", len(segs))
	}
	c2 := openFileCoord(t, dir, Options{})
	defer c2.Close()
	if c2.ReadPointer() != last.ID {
		t.Errorf("read pointer %d, want %d", c2.ReadPointer(), last.ID)
	}
}

func TestTornTail(t *testing.T) {
	dir := t.TempDir()
	c := openFileCoord(t, dir, Options{})
	var ids []uint64
	for i := 0; i < 5; i++ {
		tx := must[*Tx](t)(c.StartShort(time.Minute))
		if err := c.Commit(tx); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tx.ID)
	}
	crash(c)
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	seg := segs[len(segs)-1]
	// A crash in the middle of copying the last batch: zero its second half.
	b, _ := os.ReadFile(seg)
	lastFrame, end := 0, 0
	for end < len(b) && !zeroHeader(b[end:]) {
		_, size, ok := nextFrame(b[end:])
		if !ok {
			t.Fatal("intact log does not parse")
		}
		lastFrame, end = end, end+size
	}
	f, _ := os.OpenFile(seg, os.O_WRONLY, 0)
	mid := lastFrame + (end-lastFrame)/2
	f.WriteAt(make([]byte, end-mid), int64(mid))
	f.Close()
	c2 := openFileCoord(t, dir, Options{})
	if rp := c2.ReadPointer(); rp != ids[3] {
		t.Fatalf("read pointer %d, want %d (the torn commit is dropped)", rp, ids[3])
	}
	after := must[*Tx](t)(c2.StartShort(time.Minute))
	if after.ID <= ids[4] {
		t.Fatal("pointers must not go back even when the tail is torn")
	}
	if err := c2.Commit(after); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	// The cut tail was truncated, so the log stays readable.
	c3 := openFileCoord(t, dir, Options{})
	if c3.ReadPointer() != after.ID {
		t.Fatalf("after reopen: %d, want %d", c3.ReadPointer(), after.ID)
	}
	c3.Close()

	// Damage before the last segment is corruption, not a torn tail.
	segs, _ = filepath.Glob(filepath.Join(dir, "wal-*.log"))
	for _, s := range segs[:len(segs)-1] {
		if fi, _ := os.Stat(s); fi.Size() > 10 {
			f, _ := os.OpenFile(s, os.O_WRONLY, 0)
			f.WriteAt([]byte{0xff, 0xff}, 9)
			f.Close()
			l, _ := OpenFileLog(dir, FileLogOptions{})
			if _, err := Open(Options{Log: l}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("damaged middle segment: %v, want ErrCorrupt", err)
			}
			return
		}
	}
	t.Fatal("no earlier segment to damage")
}

func TestSegmentsRoll(t *testing.T) {
	dir := t.TempDir()
	c := openSmallSegments(t, dir, true)
	var last *Tx
	for i := 0; i < 2000; i++ {
		last = must[*Tx](t)(c.StartShort(time.Minute))
		if err := c.CanCommit(last, [][]byte{{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		if err := c.Commit(last); err != nil {
			t.Fatal(err)
		}
	}
	crash(c)
	if segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log")); len(segs) < 10 {
		t.Fatalf("expected the log to roll over many 4 KiB segments, got %d", len(segs))
	}
	l2, _ := OpenFileLog(dir, FileLogOptions{Sync: true, SegmentSize: 4096})
	c2, err := Open(Options{Log: l2, ExpiryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.ReadPointer() != last.ID {
		t.Fatalf("read pointer %d, want %d", c2.ReadPointer(), last.ID)
	}
	// A batch larger than a segment is refused, not half-written.
	big := &Batch{Edits: []Edit{{Kind: EditCommitting, Keys: make([]uint64, 1000)}}, Wait: true}
	if err := l2.Append(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized batch = %v", err)
	}
	tx := must[*Tx](t)(c2.StartShort(time.Minute))
	if err := c2.Commit(tx); err != nil {
		t.Fatalf("the log must stay usable after refusing a batch: %v", err)
	}
}

func TestBadgerLogFastPath(t *testing.T) {
	dir := t.TempDir()
	db := openBadger(t, dir, true)
	bl, err := NewBadgerLog(db, BadgerLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Log: bl, ExpiryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	acct := stagedTable{newTable(db, "acct/")}
	ctx := c.NewContext(acct)
	if !ctx.fastPath() {
		t.Fatal("a Stager on the log's DB must take the fast path")
	}
	tx, _ := ctx.Start(time.Minute)
	acct.Put("a", 10)
	if err := ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	// A conflict leaves nothing behind.
	t1, _ := ctx.Start(time.Minute)
	acct.Put("a", 20)
	other := stagedTable{newTable(db, "acct/")}
	octx := c.NewContext(other)
	octx.Start(time.Minute)
	other.Put("a", 30)
	if err := octx.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Finish(); !errors.Is(err, ErrConflict) {
		t.Fatalf("want conflict, got %v", err)
	}
	if err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	t2, _ := ctx.Start(time.Minute)
	acct.Put("b", 5)
	if err := ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	crash(c)
	db.Close()

	db = openBadger(t, dir, true)
	defer db.Close()
	bl, _ = NewBadgerLog(db, BadgerLogOptions{})
	c2, err := Open(Options{Log: bl, ExpiryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if c2.ReadPointer() != t2.ID {
		t.Fatalf("read pointer %d, want %d", c2.ReadPointer(), t2.ID)
	}
	tbl := stagedTable{newTable(db, "acct/")}
	rctx := c2.NewContext(tbl)
	r, _ := rctx.Start(time.Minute)
	if r.ID <= t2.ID {
		t.Fatal("pointer went back")
	}
	va, vera, _, _ := tbl.Get("a")
	vb, _, _, _ := tbl.Get("b")
	if va != 30 || vb != 5 || vera == t1.ID || vera == tx.ID {
		t.Fatalf("a=%d (v%d) b=%d", va, vera, vb)
	}
	// The conflicting write never landed in Badger at all.
	if n := countVersions(t, tbl.table, "a"); n != 2 {
		t.Fatalf("versions of a = %d, want 2 (the conflicting one never landed)", n)
	}
	rctx.Abort(nil)
}

func countVersions(t *testing.T, tb *table, key string) int {
	t.Helper()
	n := 0
	prefix := append(append([]byte(tb.prefix), key...), 0)
	err := tb.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A waited write Badger refuses as too large loses nothing of the other
// transactions' unwaited edits it carried: they land with the next write; the
// refused batch's own edits do not.
func TestBadgerLogTooLargeKeepsOthersEdits(t *testing.T) {
	db := openBadger(t, t.TempDir(), false)
	defer db.Close()
	bl, err := NewBadgerLog(db, BadgerLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bl.Append(&Batch{Edits: []Edit{{Kind: EditStart, TxID: 7, Expires: 1}}}); err != nil {
		t.Fatal(err)
	}
	huge := make([]Write, 100000) // small values stay in the LSM and count
	for i := range huge {
		huge[i] = Write{Key: binary.BigEndian.AppendUint64([]byte("k"), uint64(i)), Value: make([]byte, 100)}
	}
	refused := &Batch{Edits: []Edit{{Kind: EditCommitted, TxID: 9}}, Writes: huge, Wait: true}
	if err := bl.Append(refused); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized batch = %v, want ErrTooLarge", err)
	}
	if err := bl.Append(&Batch{Edits: []Edit{{Kind: EditAborted, TxID: 7}}, Wait: true}); err != nil {
		t.Fatal(err)
	}
	_, edits, err := bl.Recover()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range edits {
		got = append(got, fmt.Sprintf("%d:%d", e.Kind, e.TxID))
	}
	want := []string{fmt.Sprintf("%d:7", EditStart), fmt.Sprintf("%d:7", EditAborted)}
	if !slices.Equal(got, want) {
		t.Fatalf("recovered edits %v, want %v (the start of 7 kept, the refused commit of 9 gone)", got, want)
	}
}

// A short transaction's START waits for CanCommit, except that a checkpoint
// (which may persist data under its new pointer) logs it at once: recovery
// must know both pointers, or it could not keep the checkpoint's data hidden.
func TestShortCheckpointLogsStart(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	c := openFileCoord(t, dir, Options{Now: clk.Now})
	tx := must[*Tx](t)(c.StartShort(time.Hour))
	cp, err := c.Checkpoint(tx)
	if err != nil {
		t.Fatal(err)
	}
	crash(c)
	c2 := openFileCoord(t, dir, Options{Now: clk.Now, EndRecoveredTransactions: true})
	defer c2.Close()
	if got, want := c2.InvalidList(), []uint64{tx.ID, cp.WritePointer}; !slices.Equal(got, want) {
		t.Fatalf("invalid after recovery = %v, want %v", got, want)
	}
	if next := must[*Tx](t)(c2.StartShort(time.Minute)); next.Visible(cp.WritePointer) {
		t.Error("the checkpoint's pointer is visible after recovery")
	}
}

// A transaction recovered from the log is in the log: its next edits must
// not log a second START, which replay would take for a fresh transaction
// and so forget the checkpoints before it (their data would turn visible).
func TestRecoveredTransactionKeepsItsCheckpoints(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock()
	c := openFileCoord(t, dir, Options{Now: clk.Now})
	long := must[*Tx](t)(c.StartLong())
	cp1 := must[*Tx](t)(c.Checkpoint(long))
	crash(c)
	c2 := openFileCoord(t, dir, Options{Now: clk.Now})
	cp2 := must[*Tx](t)(c2.Checkpoint(cp1))
	other := must[*Tx](t)(c2.StartShort(time.Minute))
	if err := c2.Commit(other); err != nil {
		t.Fatal(err)
	}
	crash(c2)
	c3 := openFileCoord(t, dir, Options{Now: clk.Now})
	defer c3.Close()
	reader := must[*Tx](t)(c3.StartShort(time.Minute))
	for _, p := range []uint64{long.ID, cp1.WritePointer, cp2.WritePointer} {
		if reader.Visible(p) {
			t.Errorf("pointer %d of the recovered long transaction is visible after a second restart", p)
		}
	}
	if err := c3.Invalidate(cp2); err != nil {
		t.Fatal(err)
	}
	if got, want := c3.InvalidList(), []uint64{long.ID, cp1.WritePointer, cp2.WritePointer}; !slices.Equal(got, want) {
		t.Fatalf("invalid after invalidating it = %v, want %v", got, want)
	}
}

// A CanCommit the log refuses whole (ErrTooLarge) wrote no START either: a
// retried CanCommit must write it, or recovery would not know a transaction
// whose participants may have persisted.
func TestCanCommitRetryAfterTooLargeLogsStart(t *testing.T) {
	dir := t.TempDir()
	open := func() *Coordinator {
		l, err := OpenFileLog(dir, FileLogOptions{Sync: true, SegmentSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		return must[*Coordinator](t)(Open(Options{Log: l, ExpiryInterval: -1}))
	}
	c := open()
	tx := must[*Tx](t)(c.StartShort(time.Hour))
	many := make([][]byte, 1000) // 8 KB of key hashes: over the segment
	for i := range many {
		many[i] = []byte(fmt.Sprint("k", i))
	}
	if err := c.CanCommit(tx, many); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("CanCommit of 1000 keys with 4 KiB segments = %v, want ErrTooLarge", err)
	}
	if err := c.CanCommit(tx, [][]byte{[]byte("k")}); err != nil {
		t.Fatal(err)
	}
	crash(c)
	c2 := open()
	defer c2.Close()
	if got := c2.InProgress(); !slices.Equal(got, []uint64{tx.ID}) {
		t.Fatalf("in progress after recovery = %v, want the committing transaction %d", got, tx.ID)
	}
}
