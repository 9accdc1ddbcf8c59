package binenc

import (
	"encoding/binary"
	"fmt"
)

// Reader reads from a byte slice. The zero Reader is empty; use NewReader.
type Reader struct {
	b   []byte
	err error
	bad error // what a short or malformed read records
}

// NewReader returns a Reader over b whose failed reads record bad.
func NewReader(b []byte, bad error) Reader {
	return Reader{b: b, bad: bad}
}

// Err is the first failure, or nil.
func (r *Reader) Err() error { return r.err }

// Fail records err unless a failure is recorded already.
func (r *Reader) Fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Rest is what is left to read.
func (r *Reader) Rest() []byte { return r.b }

// Len is how many bytes are left to read.
func (r *Reader) Len() int { return len(r.b) }

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.Fail(r.bad)
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = r.bad
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Varint reads a signed (zig-zag) varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = r.bad
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Uint64 reads a fixed 8-byte little-endian number.
func (r *Reader) Uint64() uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.Fail(r.bad)
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// Count reads a uvarint count of items that take at least minSize bytes each
// (at least 1) and fails if the rest of the buffer cannot hold them.
func (r *Reader) Count(minSize int) int {
	n := r.Uvarint()
	if r.err == nil && n > uint64(len(r.b)/max(minSize, 1)) {
		r.err = fmt.Errorf("%w: count %d exceeds buffer", r.bad, n)
		return 0
	}
	return int(n)
}

// Bytes reads a uvarint length and that many bytes. The result aliases the
// buffer (its capacity ends where it does).
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = r.bad
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

// String reads a uvarint length and that many bytes as a string.
func (r *Reader) String() string {
	return string(r.Bytes())
}

// Uint64s reads a count and that many fixed 8-byte numbers (nil for none).
func (r *Reader) Uint64s() []uint64 {
	n := r.Count(8)
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = r.Uint64()
	}
	return out
}

// Uvarints reads a count and that many uvarints (nil for none).
func (r *Reader) Uvarints() []uint64 {
	n := r.Count(1)
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = r.Uvarint()
	}
	return out
}

// AppendBytes appends a uvarint length and b.
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendString appends a uvarint length and s.
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// AppendUint64s appends a uvarint count and each number as fixed 8 bytes,
// little-endian: what Reader.Uint64s reads.
func AppendUint64s(dst []byte, vs []uint64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(vs)))
	for _, v := range vs {
		dst = binary.LittleEndian.AppendUint64(dst, v)
	}
	return dst
}

// AppendUvarints appends a uvarint count and each number as a uvarint: what
// Reader.Uvarints reads.
func AppendUvarints(dst []byte, vs []uint64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(vs)))
	for _, v := range vs {
		dst = binary.AppendUvarint(dst, v)
	}
	return dst
}
