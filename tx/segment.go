package tx

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// segment is one preallocated, memory-mapped log file. Writes are copies into
// the shared map: the OS page cache holds them even if the process is killed.
type segment struct {
	f   *os.File
	mm  []byte
	off int
}

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

// sync makes bytes [from, to) durable. On Linux the page cache is shared
// by the map and the file, so fdatasync writes the mapped dirty pages too,
// and it is cheaper than msync here.
func (s *segment) sync(from, to int) error {
	if to <= from {
		return nil
	}
	return unix.Fdatasync(int(s.f.Fd()))
}

func (s *segment) close() error {
	err := syscall.Munmap(s.mm)
	s.mm = nil
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// zeroHeader reports whether b starts with an all-zero frame header: the
// preallocated part of a segment that was never written.
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
