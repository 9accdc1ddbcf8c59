package tx

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// segment is one preallocated, memory-mapped log file. Writes are copies into
// the shared map: the OS page cache holds them even if the process is killed.
// In Sync mode (direct) frames are written with pwrite instead, into blocks
// zeroed ahead of the writer (see zeroAhead).
type segment struct {
	f   *os.File
	mm  []byte
	off int

	// Sync mode: frame is the reused buffer a frame is built in for its
	// pwrite; prepared is where zeroing ahead has got to (blocks below it
	// were written, or are left to the frames); zeroing is the job running.
	direct   bool
	frame    []byte
	prepared int
	zeroing  *zeroJob
	// syncMu orders the zeroing's fdatasync and the writer's: a writeback
	// error is reported to one of them only, so the zeroing's is kept in
	// zeroSyncErr and fails every later sync.
	syncMu      sync.Mutex
	zeroSyncErr error

	// Prefaulting (see prefaultAhead): bytes from the start already asked
	// for, and the requests still running, which close waits for.
	faulted   int
	prefaults sync.WaitGroup
}

// prefaultChunk is how far ahead of the writer pages get mapped: 1 MiB is
// ~8 000 commits of a 10-key transaction, asked for in one system call.
const prefaultChunk = 1 << 20

func createSegment(path string, size int, direct bool) (*segment, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	// Allocate the blocks now: writing into a hole of a sparse file makes
	// the file system allocate a block at the page fault, on the commit path.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(size)); err != nil {
		if err := f.Truncate(int64(size)); err != nil { // no fallocate here: sparse it is
			f.Close()
			return nil, err
		}
	}
	mm, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &segment{f: f, mm: mm, direct: direct}, nil
}

func (s *segment) fits(n int) bool { return s.off+n <= len(s.mm) }

// writeFrame writes payload as one frame: header (length, CRC-32C) then
// payload, straight into the map with no intermediate buffer, or in Sync
// mode with one pwrite. A failed pwrite may leave part of the frame: a torn
// tail, which recovery cuts.
func (s *segment) writeFrame(payload []byte) error {
	if s.direct {
		return s.pwriteFrame(payload)
	}
	binary.LittleEndian.PutUint32(s.mm[s.off:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(s.mm[s.off+4:], crc32.Checksum(payload, crcTable))
	s.off += 8 + copy(s.mm[s.off+8:], payload)
	return nil
}

func (s *segment) pwriteFrame(payload []byte) error {
	end := s.off + frameSize(len(payload))
	if j := s.zeroing; j != nil && end > j.from {
		// The zeros must land before the frame, not on it: wait.
		if h := testHookZeroWait; h != nil {
			h()
		}
		s.finishZeroing()
	}
	buf := binary.LittleEndian.AppendUint32(s.frame[:0], uint32(len(payload)))
	buf = binary.LittleEndian.AppendUint32(buf, crc32.Checksum(payload, crcTable))
	buf = append(buf, payload...)
	s.frame = buf
	if cap(buf) > 1<<20 {
		s.frame = nil // a rare big group: not kept for the segment's life
	}
	if _, err := s.f.WriteAt(buf, int64(s.off)); err != nil {
		return err
	}
	s.off = end
	s.zeroAhead()
	return nil
}

func frameSize(payload int) int { return 8 + payload }

// prefaultAhead keeps the pages the writer will touch next mapped before it
// gets there. The first write to each page of the map otherwise takes a page
// fault (page cache allocation and zeroing) inside the coordinator's critical
// section; MADV_POPULATE_WRITE does that work on another goroutine (another
// core, while committers queue for the lock) and changes no byte. For the
// unsynced log only: pages populated writable count as dirty, and a synced
// log would then write the zeros ahead of it to disk at every sync.
func (s *segment) prefaultAhead() {
	if s.off+prefaultChunk/2 <= s.faulted || s.faulted >= len(s.mm) {
		return
	}
	// madvise wants a page-aligned start (an unaligned one fails with
	// EINVAL, which is ignored): faulted stays on page boundaries.
	from := max(s.faulted, s.off&^(os.Getpagesize()-1))
	s.faulted = min(from+prefaultChunk, len(s.mm))
	region := s.mm[from:s.faulted]
	s.prefaults.Add(1)
	go func() {
		defer s.prefaults.Done()
		// Best effort: an old kernel (EINVAL) just faults at the write.
		_ = unix.Madvise(region, unix.MADV_POPULATE_WRITE)
	}()
}

// sync makes bytes [from, to) durable. On Linux the page cache is shared
// by the map and the file, so fdatasync writes the mapped dirty pages too,
// and it is cheaper than msync here.
func (s *segment) sync(from, to int) error {
	if to <= from {
		return nil
	}
	if h := testHookSegmentSync; h != nil {
		h(s.f.Name())
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if err := syncSegmentFile(s.f, testHookFdatasync); err != nil {
		return err
	}
	return s.zeroSyncErr
}

// testHookSegmentSync, set by tests, sees each segment sync's file.
var testHookSegmentSync func(path string)

// testHookFdatasync, set by tests, replaces a segment's fdatasync (to
// inject the errors of a failing disk).
var testHookFdatasync func(f *os.File) error

func syncSegmentFile(f *os.File, hook func(f *os.File) error) error {
	if hook != nil {
		return hook(f)
	}
	return fdatasync(f)
}

func (s *segment) close() error {
	s.prefaults.Wait() // no madvise may outlive the map
	if s.zeroing != nil {
		s.finishZeroing() // nor a zeroing the file
	}
	err := syscall.Munmap(s.mm)
	s.mm = nil
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Zeroing ahead (Sync mode). fallocate leaves a segment's blocks
// "unwritten" (ext4, XFS): the first write into each block converts it, a
// metadata change that the next fdatasync must commit through the file
// system's journal on top of the data, and a write through the map also
// dirties the inode at every page's first write after a sync. Measured on
// the project VM (ext4; a 10 KB write + fdatasync, 1000 rounds): 0.25–0.38
// ms p50 into fallocated blocks, through the map or with pwrite, against
// 0.15 ms with pwrite into blocks already written. So in Sync mode frames
// are pwritten, and a goroutine writes zeros (and syncs them) zeroChunk at a
// time ahead of the writer, off the commit path: the group commit's
// fdatasync then writes data only. The writer never writes where a zeroing
// runs (pwriteFrame waits for it, which at these sizes means a writer that
// caught up a whole chunk); the first zeroMargin bytes of a segment, and any
// stretch the writer reaches before its zeros, just take the slower sync.
const (
	zeroChunk   = 2 << 20
	zeroAheadOf = 1 << 20 // a new job starts when the writer is this close
	zeroMargin  = 64 << 10
)

// zeroJob writes zeros over [from, to) of a segment and syncs them.
type zeroJob struct {
	from, to int
	done     chan struct{}
}

// testHookZeroing, set by tests, runs in each zeroing before it writes;
// testHookZeroWait when a writer is about to wait for one.
var (
	testHookZeroing  func(from, to int)
	testHookZeroWait func()
)

// zeroAhead starts a zeroing job if the writer is near the end of the
// prepared blocks and none runs.
func (s *segment) zeroAhead() {
	if j := s.zeroing; j != nil {
		select {
		case <-j.done:
			s.finishZeroing()
		default:
			return
		}
	}
	if s.prepared >= len(s.mm) || s.prepared-s.off >= zeroAheadOf {
		return
	}
	page := os.Getpagesize()
	from := max(s.prepared, (s.off+zeroMargin+page-1)&^(page-1))
	to := min(from+zeroChunk, len(s.mm))
	if from >= to {
		s.prepared = len(s.mm)
		return
	}
	j := &zeroJob{from: from, to: to, done: make(chan struct{})}
	s.zeroing = j
	hook, syncHook := testHookZeroing, testHookFdatasync
	go func() {
		defer close(j.done)
		if hook != nil {
			hook(from, to)
		}
		zeroes := make([]byte, min(256<<10, to-from)) // written in pieces of this size
		for off := from; off < to; off += len(zeroes) {
			if _, err := s.f.WriteAt(zeroes[:min(len(zeroes), to-off)], int64(off)); err != nil {
				return // frames overwrite these blocks all the same
			}
		}
		// Linux reports a writeback error to the first fdatasync of the file
		// after it, which may be this one and may concern frames.
		s.syncMu.Lock()
		defer s.syncMu.Unlock()
		if err := syncSegmentFile(s.f, syncHook); err != nil && s.zeroSyncErr == nil {
			s.zeroSyncErr = fmt.Errorf("zeroing ahead: %w", err)
		}
	}()
}

// finishZeroing waits for the running job. A failed write of zeros is
// forgotten (the writer writes over those blocks anyway); a failed sync
// fails the next sync (zeroSyncErr).
func (s *segment) finishZeroing() {
	j := s.zeroing
	<-j.done
	s.zeroing = nil
	s.prepared = j.to
}

// allZero reports whether b holds only zeros: the preallocated part of a
// segment that was never written.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// zeroHeader reports whether b starts with an all-zero frame header: the
// preallocated part of a segment that was never written, if all of the rest
// is zero too (allZero).
func zeroHeader(b []byte) bool {
	if len(b) < 8 {
		return true
	}
	for _, c := range b[:8] {
		if c != 0 {
			return false
		}
	}
	return true
}
