package tx

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFileLogCutAnywhere replays a FileLog's directory as a crash could
// leave it at every byte of every write of a short history: each write cut
// short in the file (a power loss before the file grew) or stopped mid-copy
// with zeros after it (kill -9 in the copy into the map), and every point
// of a snapshot (rolled but unwritten, a temporary file, written, each old
// segment deleted). Every recovery, and the one after it, must open; keep
// every acknowledged commit visible; keep every pointer of an invalidated
// or unfinished transaction that may have persisted invisible; and hand
// out no pointer again.
func TestFileLogCutAnywhere(t *testing.T) {
	steps := cutHistory(t)
	scratch := t.TempDir()
	cases := 0
	for i := 1; i < len(steps); i++ {
		prev, next := steps[i-1], steps[i]
		// The write of step i may have landed or not: its own commit is
		// neither required nor forbidden.
		want := prev.expect
		want.hidden = slices.DeleteFunc(slices.Clone(want.hidden), func(p uint64) bool { return slices.Contains(next.landing, p) })
		for _, cut := range cutsBetween(prev.files, next.files) {
			cases++
			checkCut(t, scratch, fmt.Sprintf("step %d (%s), %s", i, next.what, cut.what), cut.files, want)
		}
	}
	// And each step whole (a crash between writes), with its own expectation.
	for i, s := range steps {
		cases++
		checkCut(t, scratch, fmt.Sprintf("after step %d (%s)", i, s.what), s.files, s.expect)
	}
	t.Logf("%d crash points over %d steps", cases, len(steps))
}

type cutExpect struct {
	visible, hidden []uint64 // pointers a new transaction must see, must not see
	maxPointer      uint64   // highest pointer handed out
}

type cutStep struct {
	what    string
	files   map[string][]byte // the log directory after the step
	expect  cutExpect
	landing []uint64 // pointers the step's write makes visible (a commit's)
}

// cutHistory runs a short history of every kind of edit on a FileLog with
// small segments, recording the directory after each call.
func cutHistory(t *testing.T) []cutStep {
	dir := t.TempDir()
	clk := newFakeClock()
	l, err := OpenFileLog(dir, FileLogOptions{SegmentSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Open(Options{Log: l, ExpiryInterval: -1, Now: clk.Now, ReserveBlock: 4, SnapshotEvery: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer crash(c)
	var steps []cutStep
	var exp cutExpect
	record := func(what string, landing []uint64) {
		files := map[string][]byte{}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			files[e.Name()] = b
		}
		steps = append(steps, cutStep{what: what, files: files, landing: landing,
			expect: cutExpect{visible: slices.Clone(exp.visible), hidden: slices.Clone(exp.hidden), maxPointer: exp.maxPointer}})
	}
	ok := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	start := func(long bool) *Tx {
		t.Helper()
		var tx *Tx
		var err error
		if long {
			tx, err = c.StartLong()
		} else {
			tx, err = c.StartShort(time.Second)
		}
		ok(err)
		exp.maxPointer = max(exp.maxPointer, tx.ID)
		record(fmt.Sprintf("start %d", tx.ID), nil)
		return tx
	}
	hide := func(tx *Tx) { exp.hidden = append(exp.hidden, tx.AllWritePointers()...) }
	show := func(tx *Tx) {
		exp.hidden = slices.DeleteFunc(exp.hidden, tx.Owns)
		exp.visible = append(exp.visible, tx.AllWritePointers()...)
	}
	canCommit := func(tx *Tx, key string) {
		t.Helper()
		ok(c.CanCommit(tx, [][]byte{[]byte(key)}))
		hide(tx) // may persist from here on
		record(fmt.Sprintf("CanCommit %d", tx.ID), nil)
	}
	commit := func(tx *Tx) {
		t.Helper()
		ok(c.Commit(tx))
		show(tx)
		record(fmt.Sprintf("Commit %d", tx.ID), tx.AllWritePointers())
	}
	checkpoint := func(tx *Tx) *Tx {
		t.Helper()
		next, err := c.Checkpoint(tx)
		ok(err)
		exp.maxPointer = max(exp.maxPointer, next.WritePointer)
		hide(next)
		record(fmt.Sprintf("Checkpoint %d", tx.ID), nil)
		return next
	}
	snapshot := func() {
		t.Helper()
		ok(c.Snapshot())
		record("Snapshot", nil)
	}
	record("open", nil)

	a := start(false)
	canCommit(a, "a")
	commit(a)
	long := start(true)
	long = checkpoint(long)
	long = checkpoint(long)
	committing := start(false)
	canCommit(committing, "c")
	invalid := start(false)
	canCommit(invalid, "i")
	ok(c.Invalidate(invalid))
	record("Invalidate", nil)
	aborted := start(false)
	canCommit(aborted, "x")
	ok(c.Abort(aborted))
	exp.hidden = slices.DeleteFunc(exp.hidden, aborted.Owns) // rolled back
	record("Abort", nil)
	snapshot()
	one := start(false)
	ok(c.CommitWith(one, [][]byte{[]byte("o")}, nil))
	show(one)
	record("CommitWith", one.AllWritePointers())
	commit(committing)
	expiring := start(false)
	canCommit(expiring, "e")
	clk.Advance(2 * time.Second)
	if c.ExpireTimedOut() != 1 {
		t.Fatal("nothing expired")
	}
	record("ExpireTimedOut", nil)
	long = checkpoint(long)
	for i := range 12 { // rolls several segments
		tx := start(false)
		canCommit(tx, fmt.Sprint("k", i))
		commit(tx)
	}
	snapshot()
	commit(long)
	last := start(false)
	canCommit(last, "z")
	commit(last)
	return steps
}

type cutState struct {
	what  string
	files map[string][]byte
}

// cutsBetween returns the states a crash could leave between two recorded
// directories: each changed file written up to every byte (the files
// before it in name order written whole), cut there or zero after it, and
// for a snapshot every point from the roll to the last deletion.
func cutsBetween(prev, next map[string][]byte) []cutState {
	var out []cutState
	names := slices.Sorted(maps.Keys(next))
	snapping := false
	for _, name := range names {
		if _, had := prev[name]; !had && strings.HasPrefix(name, "snap-") {
			snapping = true
		}
	}
	if snapping {
		return snapshotCuts(prev, next)
	}
	state := maps.Clone(prev)
	for _, name := range names {
		old, now := prev[name], next[name]
		if bytes.Equal(old, now) {
			continue
		}
		padded := make([]byte, len(now))
		copy(padded, old)
		lo := 0
		for lo < len(now) && padded[lo] == now[lo] {
			lo++
		}
		hi := len(now)
		for hi > lo && padded[hi-1] == now[hi-1] {
			hi--
		}
		for _, k := range framePoints(now, lo, hi) {
			zeroed := maps.Clone(state)
			zeroed[name] = append(slices.Clone(now[:k]), padded[k:]...)
			out = append(out, cutState{fmt.Sprintf("%s written to byte %d of [%d, %d)", name, k, lo, hi), zeroed})
			short := maps.Clone(state)
			short[name] = slices.Clone(now[:k])
			out = append(out, cutState{fmt.Sprintf("%s cut at byte %d of [%d, %d)", name, k, lo, hi), short})
		}
		state[name] = now
	}
	return out
}

// framePoints are the bytes of b[lo:hi] where a write can stop that
// recovery tells apart: each frame's start, inside its header (length
// only, CRC half written), at its payload's start, middle and last byte,
// and the end.
func framePoints(b []byte, lo, hi int) []int {
	var ks []int
	for f := lo; f < hi; {
		_, size, ok := nextFrame(b[f:])
		if !ok {
			size = hi - f
		}
		ks = append(ks, f, f+3, f+6, f+8, f+8+(size-8)/2, f+size-1)
		f += size
	}
	ks = append(ks, hi)
	ks = slices.DeleteFunc(ks, func(k int) bool { return k < lo || k > hi })
	slices.Sort(ks)
	return slices.Compact(ks)
}

// snapshotCuts are the crash points of a snapshot: the roll (pending edits
// written, the next segment made), a torn temporary file, the snapshot in
// place with every older file still there, and each deletion after it.
func snapshotCuts(prev, next map[string][]byte) []cutState {
	rolled := maps.Clone(prev)
	var snap string
	for name, b := range next {
		if strings.HasPrefix(name, "snap-") {
			if _, had := prev[name]; !had {
				snap = name
				continue
			}
		}
		rolled[name] = b
	}
	out := []cutState{{"rolled, snapshot not written", rolled}}
	tmp := maps.Clone(rolled)
	tmp[snap+".tmp"] = next[snap][:len(next[snap])/2]
	out = append(out, cutState{"rolled, temporary snapshot torn", tmp})
	state := maps.Clone(rolled)
	state[snap] = next[snap]
	out = append(out, cutState{"snapshot renamed, nothing deleted", maps.Clone(state)})
	for _, name := range slices.Sorted(maps.Keys(prev)) {
		if _, kept := next[name]; !kept {
			delete(state, name)
			out = append(out, cutState{"snapshot renamed, deleted up to " + name, maps.Clone(state)})
		}
	}
	return out
}

// checkCut recovers from files (twice: the second recovery finds what the
// first cut and made) and checks want.
func checkCut(t *testing.T, dir, what string, files map[string][]byte, want cutExpect) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for round := 1; round <= 2; round++ {
		l, err := OpenFileLog(dir, FileLogOptions{SegmentSize: 1024})
		if err != nil {
			t.Fatal(err)
		}
		c, err := Open(Options{Log: l, ExpiryInterval: -1})
		if err != nil {
			t.Fatalf("%s: recovery %d: %v", what, round, err)
		}
		r, err := c.StartShort(time.Minute)
		if err != nil {
			t.Fatalf("%s: recovery %d: start: %v", what, round, err)
		}
		if r.ID <= want.maxPointer {
			t.Fatalf("%s: recovery %d: pointer %d handed out again (max before %d)", what, round, r.ID, want.maxPointer)
		}
		for _, p := range want.visible {
			if !r.Visible(p) {
				t.Fatalf("%s: recovery %d: committed pointer %d invisible", what, round, p)
			}
		}
		for _, p := range want.hidden {
			if r.Visible(p) {
				t.Fatalf("%s: recovery %d: pointer %d of an invalid or unfinished transaction visible", what, round, p)
			}
		}
		c.Abort(r)
		crash(c)
	}
}
