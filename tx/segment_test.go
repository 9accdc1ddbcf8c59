package tx

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The unsynced log maps the pages ahead of its writer before it gets there,
// so that the first write to a page takes no fault under the coordinator's
// lock. An unaligned madvise fails silently (EINVAL), so this is the only
// place a broken prefault shows: as page faults in writes.
func TestSegmentPrefaultsAhead(t *testing.T) {
	const size = 8 << 20
	s, err := createSegment(filepath.Join(t.TempDir(), "wal-1.log"), size)
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
