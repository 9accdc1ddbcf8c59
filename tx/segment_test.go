package tx

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The unsynced log maps the pages ahead of its writer before it gets there,
// so that the first write to a page takes no fault under the coordinator's
// lock. An unaligned madvise fails silently (EINVAL), so this is the only
// place a broken prefault shows: as page faults in writes.
func TestSegmentPrefaultsAhead(t *testing.T) {
	const size = 8 << 20
	s, err := createSegment(filepath.Join(t.TempDir(), "wal-1.log"), size, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	page := os.Getpagesize()
	frame := make([]byte, 1000) // frames that do not divide a page
	for s.off < 3*prefaultChunk+12345 {
		s.writeFrame(frame)
		s.prefaultAhead()
	}
	s.prefaults.Wait()
	if s.faulted%page != 0 || s.faulted < s.off+prefaultChunk/2 {
		t.Fatalf("prefaulted up to %d, written up to %d", s.faulted, s.off)
	}
	// Writing into the prefaulted pages takes (next to) no page faults.
	var before, after unix.Rusage
	end := s.faulted - len(frame) - 8
	pages := (end - s.off) / page
	unix.Getrusage(unix.RUSAGE_SELF, &before)
	for s.off < end {
		s.writeFrame(frame)
	}
	unix.Getrusage(unix.RUSAGE_SELF, &after)
	if faults := int(after.Minflt - before.Minflt); faults > pages/8 {
		t.Fatalf("%d page faults writing %d prefaulted pages", faults, pages)
	}
}

// In Sync mode a roll syncs the full segment before it creates the next
// one. It created (and durably named) the next one first: a power loss
// between the two left the full segment's unsynced tail torn before a later
// segment, which recovery refuses as damage (ErrCorrupt) though no write
// there had been acknowledged.
func TestRollSyncsBeforeNextSegment(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenFileLog(dir, FileLogOptions{Sync: true, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, Options{Log: l, SnapshotEvery: 1 << 30})
	syncs := watchSegmentSyncs(t, l)
	keys := make([][]byte, 50) // a COMMITTING edit of 400 bytes: a roll every ten commits
	for i := range keys {
		keys[i] = []byte{byte(i)}
	}
	for range 40 {
		tx := must[*Tx](t)(c.StartShort(time.Minute))
		if err := c.CanCommit(tx, keys); err != nil {
			t.Fatal(err)
		}
		if err := c.Commit(tx); err != nil {
			t.Fatal(err)
		}
	}
	if segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log")); len(segs) < 3 {
		t.Fatalf("segments %v: no roll to test", segs)
	}
	if len(syncs.late) > 0 {
		t.Fatalf("segments %v synced after the next one was created", syncs.late)
	}
}

// segmentSyncs records the segment syncs of a FileLog (testHookSegmentSync)
// by file name: all of them, and those that came after the next segment
// had been created (late).
type segmentSyncs struct{ synced, late []string }

func watchSegmentSyncs(t *testing.T, l *FileLog) *segmentSyncs {
	s := &segmentSyncs{}
	testHookSegmentSync = func(path string) {
		var seq uint64
		fmt.Sscanf(filepath.Base(path), "wal-%x.log", &seq)
		s.synced = append(s.synced, filepath.Base(path))
		if _, err := os.Stat(l.segPath(seq + 1)); err == nil {
			s.late = append(s.late, filepath.Base(path))
		}
	}
	t.Cleanup(func() { testHookSegmentSync = nil })
	return s
}

// In Sync mode recovery syncs every segment it replays before it creates
// the next one. It did not (unless it cut a torn tail): a process killed
// while a group sync ran left frames written but not synced, recovery
// replayed them and acted on them (a commit visible, later commits built on
// it in the new segment), and a power loss soon after lost them: a tail of
// zeros skipped silently (the commit undone under the ones built on it), or
// a lost page before the last segment refused as ErrCorrupt.
func TestRecoverySyncsReplayedSegments(t *testing.T) {
	dir := t.TempDir()
	c := openSmallSegments(t, dir, true)
	commitN(t, c, 300)
	crash(c)
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	if len(segs) < 2 {
		t.Fatalf("segments %v: no roll to test", segs)
	}
	l2, err := OpenFileLog(dir, FileLogOptions{Sync: true, SegmentSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	syncs := watchSegmentSyncs(t, l2)
	mustOpen(t, Options{Log: l2})
	for _, seg := range segs {
		if !slices.Contains(syncs.synced, filepath.Base(seg)) {
			t.Errorf("recovery replayed %s without syncing it (synced %v)", filepath.Base(seg), syncs.synced)
		}
	}
	if last := filepath.Base(segs[len(segs)-1]); slices.Contains(syncs.late, last) {
		t.Fatalf("%s synced after recovery created the next segment", last)
	}
}

// In Sync mode a goroutine writes zeros ahead of the writer. A writer that
// reaches the region of a zeroing still running must wait for it: the zeros
// landing after the frames would erase acknowledged commits.
func TestZeroingNeverOverwritesFrames(t *testing.T) {
	gate := make(chan struct{})
	var jobs atomic.Int32
	testHookZeroing = func(from, to int) {
		if jobs.Add(1) == 1 {
			<-gate // hold the first zeroing until the writer reaches it
		}
	}
	waited := false
	testHookZeroWait = func() {
		if !waited {
			waited = true
			close(gate)
		}
	}
	t.Cleanup(func() { testHookZeroing, testHookZeroWait = nil, nil })
	path := filepath.Join(t.TempDir(), "wal-1.log")
	const size = 1 << 20
	s, err := createSegment(path, size, true)
	if err != nil {
		t.Fatal(err)
	}
	var written [][]byte
	for i := 0; s.fits(frameSize(1000)); i++ {
		payload := bytes.Repeat([]byte{byte(i%255 + 1)}, 1000)
		if err := s.writeFrame(payload); err != nil {
			t.Fatal(err)
		}
		written = append(written, payload)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if !waited || jobs.Load() == 0 {
		t.Fatalf("zeroings %d, writer waited %v: nothing tested", jobs.Load(), waited)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range written {
		payload, n, ok := nextFrame(b)
		if !ok || !bytes.Equal(payload, want) {
			t.Fatalf("frame %d of %d lost (ok %v)", i, len(written), ok)
		}
		b = b[n:]
	}
}
