package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Binary encodings shared by the logs: edits as a run of records, and the
// State of a snapshot. Everything is little-endian varints; hashes are fixed
// 8 bytes. Both are framed with a CRC-32C by the logs that store them.

var crcTable = crc32.MakeTable(crc32.Castagnoli)

const stateMagic = "FRTXS1"

var errShort = errors.New("short buffer")

func appendEdit(dst []byte, e *Edit) []byte {
	dst = append(dst, byte(e.Kind), byte(e.TxKind))
	dst = binary.AppendUvarint(dst, e.TxID)
	dst = binary.AppendUvarint(dst, e.Pointer)
	dst = binary.AppendVarint(dst, e.Expires)
	dst = binary.AppendUvarint(dst, uint64(len(e.Keys)))
	for _, k := range e.Keys {
		dst = binary.LittleEndian.AppendUint64(dst, k)
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Pointers)))
	for _, p := range e.Pointers {
		dst = binary.AppendUvarint(dst, p)
	}
	return dst
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if r.err != nil || len(r.b) < 1 {
		r.err = errShort
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) u64() uint64 {
	if r.err != nil || len(r.b) < 8 {
		r.err = errShort
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

// count reads a length and checks it against what the buffer can hold, so a
// corrupt length cannot make us allocate gigabytes.
func (r *reader) count(minSize int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/max(minSize, 1)) {
		r.err = fmt.Errorf("count %d exceeds buffer", n)
		return 0
	}
	return int(n)
}

func (r *reader) u64s() []uint64 {
	n := r.count(8)
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = r.u64()
	}
	return out
}

func (r *reader) uvarints() []uint64 {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = r.uvarint()
	}
	return out
}

func decodeEdits(b []byte, out []Edit) ([]Edit, error) {
	r := &reader{b: b}
	for len(r.b) > 0 && r.err == nil {
		var e Edit
		e.Kind = EditKind(r.byte())
		e.TxKind = Kind(r.byte())
		e.TxID = r.uvarint()
		e.Pointer = r.uvarint()
		e.Expires = r.varint()
		e.Keys = r.u64s()
		e.Pointers = r.uvarints()
		if r.err == nil && (e.Kind < EditReserve || e.Kind > EditPrune) {
			r.err = fmt.Errorf("unknown edit kind %d", e.Kind)
		}
		if r.err == nil {
			out = append(out, e)
		}
	}
	if r.err != nil {
		return out, fmt.Errorf("%w: edit: %v", ErrCorrupt, r.err)
	}
	return out, nil
}

func encodeState(s *State) []byte {
	b := []byte(stateMagic)
	b = binary.AppendUvarint(b, s.NextPointer)
	b = binary.AppendUvarint(b, s.ReadPointer)
	b = binary.AppendUvarint(b, uint64(len(s.Invalid)))
	for _, p := range s.Invalid {
		b = binary.AppendUvarint(b, p)
	}
	b = binary.AppendUvarint(b, uint64(len(s.InProgress)))
	for _, t := range s.InProgress {
		b = binary.AppendUvarint(b, t.ID)
		b = append(b, byte(t.Kind))
		b = binary.AppendVarint(b, t.Expires)
		if t.Committing {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendUvarint(b, uint64(len(t.Pointers)))
		for _, p := range t.Pointers {
			b = binary.AppendUvarint(b, p)
		}
		b = binary.AppendUvarint(b, uint64(len(t.Keys)))
		for _, k := range t.Keys {
			b = binary.LittleEndian.AppendUint64(b, k)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(s.Committed)))
	for _, k := range s.Committed {
		b = binary.LittleEndian.AppendUint64(b, k.Key)
		b = binary.AppendUvarint(b, k.Pointer)
	}
	return b
}

func decodeState(b []byte) (*State, error) {
	if len(b) < len(stateMagic) || string(b[:len(stateMagic)]) != stateMagic {
		return nil, fmt.Errorf("%w: snapshot: bad magic", ErrCorrupt)
	}
	r := &reader{b: b[len(stateMagic):]}
	s := &State{NextPointer: r.uvarint(), ReadPointer: r.uvarint()}
	s.Invalid = r.uvarints()
	n := r.count(4)
	for i := 0; i < n && r.err == nil; i++ {
		t := InProgressTx{ID: r.uvarint(), Kind: Kind(r.byte()), Expires: r.varint(), Committing: r.byte() == 1}
		t.Pointers = r.uvarints()
		t.Keys = r.u64s()
		s.InProgress = append(s.InProgress, t)
	}
	n = r.count(9)
	for i := 0; i < n && r.err == nil; i++ {
		s.Committed = append(s.Committed, CommittedKey{Key: r.u64(), Pointer: r.uvarint()})
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrCorrupt, r.err)
	}
	return s, nil
}

// frame wraps payload as [len u32][crc32c u32][payload].
func appendFrame(dst, payload []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(payload)))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(payload, crcTable))
	return append(dst, payload...)
}

// nextFrame returns the payload of the frame at the start of b and the size of
// the frame, or ok=false when b does not start with a whole, intact frame.
func nextFrame(b []byte) (payload []byte, size int, ok bool) {
	if len(b) < 8 {
		return nil, 0, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n > len(b)-8 {
		return nil, 0, false
	}
	payload = b[8 : 8+n]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, 0, false
	}
	return payload, 8 + n, true
}
