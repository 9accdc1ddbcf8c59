package binenc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

var errBad = errors.New("bad")

func TestRoundTrip(t *testing.T) {
	b := []byte{7}
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -5)
	b = binary.LittleEndian.AppendUint64(b, 1<<60)
	b = AppendBytes(b, []byte("key"))
	b = AppendString(b, "trace")
	b = AppendUint64s(b, []uint64{1, 2})
	b = AppendUvarints(b, []uint64{3, 1 << 40})
	b = AppendUvarints(b, nil)
	b = append(b, "tail"...)

	r := NewReader(b, errBad)
	if r.Byte() != 7 || r.Uvarint() != 300 || r.Varint() != -5 || r.Uint64() != 1<<60 {
		t.Fatal("numbers")
	}
	if k := r.Bytes(); string(k) != "key" || cap(k) != 3 {
		t.Fatalf("bytes %q cap %d", k, cap(k))
	}
	if r.String() != "trace" {
		t.Fatal("string")
	}
	if !slices.Equal(r.Uint64s(), []uint64{1, 2}) || !slices.Equal(r.Uvarints(), []uint64{3, 1 << 40}) || r.Uvarints() != nil {
		t.Fatal("lists")
	}
	if r.Err() != nil || !bytes.Equal(r.Rest(), []byte("tail")) || r.Len() != 4 {
		t.Fatalf("rest %q err %v", r.Rest(), r.Err())
	}
}

func TestStickyAndBounded(t *testing.T) {
	// A count far beyond the buffer fails without allocating.
	b := binary.AppendUvarint(nil, 1<<40)
	r := NewReader(b, errBad)
	if r.Uint64s() != nil || !errors.Is(r.Err(), errBad) {
		t.Fatalf("count: %v", r.Err())
	}
	// The first failure sticks; later reads return zero values.
	r = NewReader([]byte{1}, errBad)
	if r.Uint64() != 0 || r.Err() != errBad {
		t.Fatal("short u64")
	}
	r.Fail(errors.New("other"))
	if r.Byte() != 0 || r.Err() != errBad {
		t.Fatal("not sticky")
	}
	// A length past the end fails.
	r = NewReader(AppendString(nil, "abc")[:3], errBad)
	if r.String() != "" || r.Err() != errBad {
		t.Fatal("short string")
	}
}
