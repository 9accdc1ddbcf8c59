package badgerq

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

var codecEvents = []queue.Event{
	{Payload: []byte("plain")},
	{},
	{Payload: []byte("k"), Key: []byte("user-1")},
	{Payload: []byte("k0"), Key: []byte{}},
	{Payload: []byte("t"), EventTime: time.Unix(1700000000, 123)},
	{Payload: []byte("all"), Key: []byte("k"), EventTime: time.Unix(-5, 0), TraceID: "trace-1"},
}

// TestEventCodec: the packed format is byte-identical to its definition
// (golden), next decodes what appendEvent wrote, and skip steps over exactly
// the bytes next reads.
func TestEventCodec(t *testing.T) {
	v := []byte{valueVersion}
	for i := range codecEvents {
		v = appendEvent(v, &codecEvents[i])
	}
	varint := func(ns int64) string { return hex.EncodeToString(binary.AppendVarint(nil, ns)) }
	want := "01" +
		"00" + "05" + hex.EncodeToString([]byte("plain")) +
		"00" + "00" +
		"01" + "01" + hex.EncodeToString([]byte("k")) + "06" + hex.EncodeToString([]byte("user-1")) +
		"01" + "02" + hex.EncodeToString([]byte("k0")) + "00" +
		"02" + "01" + hex.EncodeToString([]byte("t")) + varint(1700000000_000000123) +
		"07" + "03" + hex.EncodeToString([]byte("all")) + "01" + hex.EncodeToString([]byte("k")) + varint(-5_000000000) +
		"07" + hex.EncodeToString([]byte("trace-1"))
	if got := hex.EncodeToString(v); got != want {
		t.Fatalf("encoding\n got %s\nwant %s", got, want)
	}
	r, err := newEventReader(v)
	if err != nil {
		t.Fatal(err)
	}
	s := r
	for i, want := range codecEvents {
		var ev queue.Event
		if err := r.next(&ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !bytes.Equal(ev.Payload, want.Payload) || !bytes.Equal(ev.Key, want.Key) || (ev.Key == nil) != (want.Key == nil) ||
			!ev.EventTime.Equal(want.EventTime) || ev.TraceID != want.TraceID {
			t.Errorf("event %d: %+v, want %+v", i, ev, want)
		}
		if err := s.skip(); err != nil || len(s.b) != len(r.b) {
			t.Fatalf("event %d: skip left %d bytes (%v), next %d", i, len(s.b), err, len(r.b))
		}
	}
	if len(r.b) != 0 || r.next(&queue.Event{}) == nil || s.skip() == nil {
		t.Fatalf("%d bytes left; reading past the end must fail", len(r.b))
	}
}

// FuzzEventReader: on any value, skip and next agree on where each event
// ends and on the errors; what next decodes re-encodes to the same bytes.
func FuzzEventReader(f *testing.F) {
	v := []byte{valueVersion}
	for i := range codecEvents {
		v = appendEvent(v, &codecEvents[i])
		f.Add(bytes.Clone(v))
	}
	f.Add([]byte{valueVersion, 0x07, 0x80})
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := newEventReader(v)
		if err != nil {
			return
		}
		s := r
		for len(r.b) > 0 {
			var ev queue.Event
			nerr := r.next(&ev)
			serr := s.skip()
			if (nerr == nil) != (serr == nil) {
				t.Fatalf("next: %v, skip: %v", nerr, serr)
			}
			if nerr != nil {
				return
			}
			if len(r.b) != len(s.b) {
				t.Fatalf("next left %d bytes, skip %d", len(r.b), len(s.b))
			}
			rr := eventReader{b: appendEvent(nil, &ev)}
			var again queue.Event
			if err := rr.next(&again); err != nil || len(rr.b) != 0 || !bytes.Equal(again.Payload, ev.Payload) ||
				!bytes.Equal(again.Key, ev.Key) || (again.Key == nil) != (ev.Key == nil) ||
				!again.EventTime.Equal(ev.EventTime) || again.TraceID != ev.TraceID {
				t.Fatalf("re-encoded %+v reads back as %+v (%v)", ev, again, err)
			}
		}
	})
}
