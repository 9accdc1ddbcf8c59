package builtin

import (
	"encoding/binary"
	"os"

	"github.com/cespare/xxhash/v2"
)

// A fingerprint tells whether a file holds, just before an offset, the
// bytes that were there when the offset was committed: a hash of the last
// tailWindow bytes before the offset (all of them, nearer the start). The
// file sink records one with each publish, the file source with each step,
// so that a file at a changed path (or replaced at the same one) is taken
// for the committed one only if its bytes say so.
const tailWindow = 4096

// fingerprint hashes the bytes before an offset; b may hold more of them
// (only the last tailWindow count).
func fingerprint(b []byte) uint64 {
	if len(b) > tailWindow {
		b = b[len(b)-tailWindow:]
	}
	return xxhash.Sum64(b)
}

// readBefore reads the up to tailWindow bytes of f before off into buf's
// storage; f must be at least off bytes long.
func readBefore(f *os.File, off int64, buf []byte) ([]byte, error) {
	n := min(off, tailWindow)
	if int64(cap(buf)) < n {
		buf = make([]byte, n, 2*tailWindow)
	}
	buf = buf[:n]
	if _, err := f.ReadAt(buf, off-n); err != nil {
		return nil, err
	}
	return buf, nil
}

// matches reports whether f holds, before off, the bytes fingerprinted fp
// (false when f is shorter than off).
func matches(f *os.File, size, off int64, fp uint64) (bool, error) {
	if size < off {
		return false, nil
	}
	b, err := readBefore(f, off, nil)
	if err != nil {
		return false, err
	}
	return fingerprint(b) == fp, nil
}

// offsetRecord is an offset and the fingerprint of the bytes before it.
func offsetRecord(off, fp uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, off), fp)
}

// sameFileAs reports whether path exists, and whether it names the file f.
func sameFileAs(path string, f *os.File) (exists, same bool) {
	a, err := os.Stat(path)
	if err != nil {
		return false, false
	}
	b, err := f.Stat()
	return true, err == nil && os.SameFile(a, b)
}
