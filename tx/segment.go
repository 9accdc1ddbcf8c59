package tx

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// segment is one preallocated, memory-mapped log file. Writes are copies into
// the shared map: the OS page cache holds them even if the process is killed.
type segment struct {
	f   *os.File
	mm  []byte
	off int

	// Prefaulting (see prefaultAhead): bytes from the start already asked
	// for, and the requests still running, which close waits for.
	faulted   int
	prefaults sync.WaitGroup
}

// prefaultChunk is how far ahead of the writer pages get mapped: 1 MiB is
// ~8 000 commits of a 10-key transaction, asked for in one system call.
const prefaultChunk = 1 << 20

func createSegment(path string, size int) (*segment, error) {
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
	return &segment{f: f, mm: mm}, nil
}

func (s *segment) fits(n int) bool { return s.off+n <= len(s.mm) }

// writeFrame writes payload as one frame straight into the map: header
// (length, CRC-32C) then payload, with no intermediate buffer.
func (s *segment) writeFrame(payload []byte) {
	binary.LittleEndian.PutUint32(s.mm[s.off:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(s.mm[s.off+4:], crc32.Checksum(payload, crcTable))
	s.off += 8 + copy(s.mm[s.off+8:], payload)
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
	return unix.Fdatasync(int(s.f.Fd()))
}

// testHookSegmentSync, set by tests, sees each segment sync's file.
var testHookSegmentSync func(path string)

func (s *segment) close() error {
	s.prefaults.Wait() // no madvise may outlive the map
	err := syscall.Munmap(s.mm)
	s.mm = nil
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
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
