package tx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/flowrun/flowrun/internal/binenc"
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
	dst = binenc.AppendUint64s(dst, e.Keys)
	return binenc.AppendUvarints(dst, e.Pointers)
}

func decodeEdits(b []byte, out []Edit) ([]Edit, error) {
	r := binenc.NewReader(b, errShort)
	for r.Len() > 0 && r.Err() == nil {
		var e Edit
		e.Kind = EditKind(r.Byte())
		e.TxKind = Kind(r.Byte())
		e.TxID = r.Uvarint()
		e.Pointer = r.Uvarint()
		e.Expires = r.Varint()
		e.Keys = r.Uint64s()
		e.Pointers = r.Uvarints()
		if r.Err() == nil && (e.Kind < EditReserve || e.Kind > EditPrune) {
			r.Fail(fmt.Errorf("unknown edit kind %d", e.Kind))
		}
		if r.Err() == nil {
			out = append(out, e)
		}
	}
	if err := r.Err(); err != nil {
		return out, fmt.Errorf("%w: edit: %v", ErrCorrupt, err)
	}
	return out, nil
}

func encodeState(s *State) []byte {
	b := []byte(stateMagic)
	b = binary.AppendUvarint(b, s.NextPointer)
	b = binary.AppendUvarint(b, s.ReadPointer)
	b = binenc.AppendUvarints(b, s.Invalid)
	b = binary.AppendUvarint(b, uint64(len(s.InProgress)))
	for _, t := range s.InProgress {
		b = binary.AppendUvarint(b, t.ID)
		b = append(b, byte(t.Kind))
		b = binary.AppendVarint(b, t.Expires)
		switch { // one byte: 0 in progress, 1 committing, 2 committing but refused
		case t.Committing && t.Refused:
			b = append(b, 2)
		case t.Committing:
			b = append(b, 1)
		default:
			b = append(b, 0)
		}
		b = binenc.AppendUvarints(b, t.Pointers)
		b = binenc.AppendUint64s(b, t.Keys)
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
	r := binenc.NewReader(b[len(stateMagic):], errShort)
	s := &State{NextPointer: r.Uvarint(), ReadPointer: r.Uvarint()}
	s.Invalid = r.Uvarints()
	n := r.Count(4)
	for i := 0; i < n && r.Err() == nil; i++ {
		t := InProgressTx{ID: r.Uvarint(), Kind: Kind(r.Byte()), Expires: r.Varint()}
		committing := r.Byte()
		t.Committing, t.Refused = committing == 1 || committing == 2, committing == 2
		t.Pointers = r.Uvarints()
		t.Keys = r.Uint64s()
		s.InProgress = append(s.InProgress, t)
	}
	n = r.Count(9)
	for i := 0; i < n && r.Err() == nil; i++ {
		s.Committed = append(s.Committed, CommittedKey{Key: r.Uint64(), Pointer: r.Uvarint()})
	}
	if r.Err() == nil && r.Len() != 0 {
		r.Fail(fmt.Errorf("%d trailing bytes", r.Len()))
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrCorrupt, err)
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
