package tx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// commitN commits n empty short transactions and returns the last.
func commitN(t *testing.T, c *Coordinator, n int) *Tx {
	t.Helper()
	var last *Tx
	for i := 0; i < n; i++ {
		last = must[*Tx](t)(c.StartShort(time.Minute))
		if err := c.Commit(last); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// A damaged snapshot is refused with ErrCorrupt naming the file: the segments
// it covered are gone, so recovering without it (or from an older one) would
// lose commits and the invalid list and hand out old pointers again.
func TestDamagedSnapshotRefused(t *testing.T) {
	for _, older := range []bool{false, true} {
		dir := t.TempDir()
		c := openFileCoord(t, dir, Options{ReserveBlock: 4})
		commitN(t, c, 10)
		var olderPath string
		var olderBytes []byte
		if older {
			// An older snapshot left behind (a crash before it was deleted).
			if err := c.Snapshot(); err != nil {
				t.Fatal(err)
			}
			snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.bin"))
			olderPath = snaps[0]
			olderBytes, _ = os.ReadFile(olderPath)
		}
		commitN(t, c, 10)
		if err := c.Snapshot(); err != nil {
			t.Fatal(err)
		}
		if older {
			if err := os.WriteFile(olderPath, olderBytes, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		last := commitN(t, c, 1)
		crash(c)
		snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.bin"))
		newest := snaps[len(snaps)-1]
		b, err := os.ReadFile(newest)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-1] ^= 0x40 // bit rot in the payload: the CRC no longer matches
		if err := os.WriteFile(newest, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if older {
			snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.bin"))
			if len(snaps) != 2 {
				t.Fatalf("snapshots %v", snaps)
			}
		}
		l, err := OpenFileLog(dir, FileLogOptions{Sync: true})
		if err != nil {
			t.Fatal(err)
		}
		c2, err := Open(Options{Log: l, ExpiryInterval: -1})
		if err == nil {
			rp := c2.ReadPointer()
			c2.Close()
			t.Fatalf("older=%v: opened on a damaged snapshot (read pointer %d, was %d)", older, rp, last.ID)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(newest)) {
			t.Fatalf("older=%v: %v, want ErrCorrupt naming %s", older, err, filepath.Base(newest))
		}
	}
}

// snapshotThenCrash leaves a synced FileLog directory with three commits and
// a snapshot of them, as a killed process leaves it.
func snapshotThenCrash(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	c := openFileCoord(t, dir, Options{})
	commitN(t, c, 3)
	if err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	crash(c)
	return dir
}

// A snapshot that frames fine but does not decode is refused naming the file.
func TestUndecodableSnapshotNamesFile(t *testing.T) {
	dir := snapshotThenCrash(t)
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.bin"))
	if err := os.WriteFile(snaps[0], appendFrame(nil, []byte(stateMagic+"\xff")), 0o644); err != nil {
		t.Fatal(err)
	}
	l, _ := OpenFileLog(dir, FileLogOptions{})
	_, err := Open(Options{Log: l, ExpiryInterval: -1})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(snaps[0])) {
		t.Fatalf("%v, want ErrCorrupt naming %s", err, filepath.Base(snaps[0]))
	}
}

// A segment missing after the snapshot (or a missing snapshot, whose
// segments were deleted) is refused: replaying around the hole would skip
// commits.
func TestMissingSegmentRefused(t *testing.T) {
	for _, missing := range []string{"middle", "snapshot", "after snapshot"} {
		dir := t.TempDir()
		c := openSmallSegments(t, dir, true)
		if missing != "middle" {
			commitN(t, c, 10)
			if err := c.Snapshot(); err != nil {
				t.Fatal(err)
			}
		}
		commitN(t, c, 2000)
		crash(c)
		segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
		if len(segs) < 4 {
			t.Fatalf("segments %v", segs)
		}
		gone := segs
		switch missing {
		case "middle":
			gone = segs[len(segs)/2 : len(segs)/2+1]
		case "snapshot":
			gone, _ = filepath.Glob(filepath.Join(dir, "snap-*.bin"))
		}
		for _, f := range gone { // "after snapshot": every segment
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		l2, _ := OpenFileLog(dir, FileLogOptions{})
		c2, err := Open(Options{Log: l2, ExpiryInterval: -1})
		if err == nil {
			c2.Close()
			t.Fatalf("%s missing: opened", missing)
		}
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%s missing: %v, want ErrCorrupt", missing, err)
		}
	}
}

// Zeros where a frame should start, with frames after them, are damage (a
// page lost to a power failure, or overwritten): before the last segment
// recovery refuses with ErrCorrupt, as for any other damage there; in the
// last one it is a torn tail (a sync that never finished), cut so that the
// next recovery does not find it before the last segment. Zeros were taken
// for the never-written rest of the segment wherever they were, so recovery
// skipped the rest of that segment silently and replayed the later ones:
// lost commits, and INVALIDs whose data then turned visible.
func TestZeroedFrameIsDamage(t *testing.T) {
	for _, last := range []bool{false, true} {
		dir := t.TempDir()
		c := openSmallSegments(t, dir, false)
		commitN(t, c, 2000)
		crash(c)
		segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
		if len(segs) < 3 {
			t.Fatalf("segments %v", segs)
		}
		seg := segs[0]
		if last {
			seg = segs[len(segs)-1]
		}
		b, _ := os.ReadFile(seg)
		// The third frame's header, with frames after it.
		off := 0
		for range 2 {
			_, size, ok := nextFrame(b[off:])
			if !ok {
				t.Fatalf("%s does not parse", seg)
			}
			off += size
		}
		f, _ := os.OpenFile(seg, os.O_WRONLY, 0)
		f.WriteAt(make([]byte, 8), int64(off))
		f.Close()
		l2, _ := OpenFileLog(dir, FileLogOptions{Sync: true, SegmentSize: 4096})
		c2, err := Open(Options{Log: l2, ExpiryInterval: -1})
		if !last {
			if err == nil {
				c2.Close()
				t.Fatal("opened with a zeroed frame before the last segment")
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(seg)) {
				t.Fatalf("zeroed frame before the last segment: %v, want ErrCorrupt naming %s", err, filepath.Base(seg))
			}
			continue
		}
		if err != nil {
			t.Fatalf("zeroed frame in the last segment (a torn tail): %v", err)
		}
		commitN(t, c2, 1)
		c2.Close()
		l3, _ := OpenFileLog(dir, FileLogOptions{Sync: true, SegmentSize: 4096})
		c3, err := Open(Options{Log: l3, ExpiryInterval: -1})
		if err != nil {
			t.Fatalf("the recovery after the torn tail's: %v", err)
		}
		c3.Close()
	}
}
