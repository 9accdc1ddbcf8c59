package runtime

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/binenc"
)

// Queue payloads carry an envelope so that a consumer sees every partition key
// the producer set (flowlet.Event.Keys), not only the queue's hash key:
//
//	0x00 payload                                  no keys besides the queue's
//	0x01 n:uvarint (len name len value)* payload  n named keys
//
// The queue's own key (planner.Queue.Key) travels in queue.Event.Key, which
// picks the partition, and is not repeated in the envelope.
const (
	envPlain = 0x00
	envKeys  = 0x01
)

var errBadEnvelope = errors.New("runtime: malformed event envelope")

func appendEnvelope(dst []byte, keys []flowlet.KeyValue, skip string, payload []byte) []byte {
	n := 0
	for _, kv := range keys {
		if kv.Name != skip {
			n++
		}
	}
	if n == 0 {
		dst = append(dst, envPlain)
		return append(dst, payload...)
	}
	dst = append(dst, envKeys)
	dst = binary.AppendUvarint(dst, uint64(n))
	for _, kv := range keys {
		if kv.Name == skip {
			continue
		}
		dst = binenc.AppendString(dst, kv.Name)
		dst = binenc.AppendString(dst, kv.Value)
	}
	return append(dst, payload...)
}

// decodeEnvelope returns the extra keys and the payload (a sub-slice of b).
func decodeEnvelope(b []byte, keys []flowlet.KeyValue) ([]flowlet.KeyValue, []byte, error) {
	if len(b) == 0 {
		return keys, nil, errBadEnvelope
	}
	switch b[0] {
	case envPlain:
		return keys, b[1:], nil
	case envKeys:
		r := binenc.NewReader(b[1:], errBadEnvelope)
		n := r.Uvarint()
		for i := uint64(0); i < n && r.Err() == nil; i++ {
			name := r.String()
			value := r.String()
			keys = append(keys, flowlet.KeyValue{Name: name, Value: value})
		}
		if err := r.Err(); err != nil {
			return keys, nil, err
		}
		return keys, r.Rest(), nil
	}
	return keys, nil, errBadEnvelope
}

// DeadLetter is one entry of a flowlet's dead-letter queue: an input event
// (or, for sources and ticks, the data that could not be handled) with the
// error that put it there.
type DeadLetter struct {
	// Flowlet is the flowlet whose step failed.
	Flowlet string `json:"flowlet"`
	// Input is the queue the event came from; "" for a source's own dead
	// letters, "tick" for a failed tick.
	Input string `json:"input"`
	// EventID is the event's id in Input (stable across retries).
	EventID string `json:"event_id"`
	// Error is the error text of the last attempt (truncated to 16 KiB).
	Error string `json:"error"`
	// Attempts is how many times the event was tried.
	Attempts int `json:"attempts"`
	// Time is when it was dead-lettered.
	Time time.Time `json:"time"`
	// Keys are the partition keys the event carried.
	Keys KeyList `json:"keys,omitempty"`
	// EventTime and TraceID are the event's headers.
	EventTime time.Time `json:"event_time,omitzero"`
	TraceID   string    `json:"trace_id,omitempty"`
	// Payload is the event's payload (a source may store only a prefix).
	Payload []byte `json:"-"`
	// Truncated: the record was too large for one atomic write of the
	// store, so only a prefix of the payload (and of the error) was kept;
	// PayloadBytes is the event's full payload size. A truncated dead
	// letter is not replayed (dlq replay keeps it).
	Truncated    bool `json:"truncated,omitempty"`
	PayloadBytes int  `json:"payload_bytes,omitempty"`
}

// Records are version 1; a truncated record is version 2, which adds
// uvarint(flags) uvarint(payload bytes) before the payload (flag 1:
// truncated). One whose event time UnixNano cannot hold (outside
// 1678–2262, or the Unix epoch itself, which version 1 writes as 0: no
// time) is version 3: version 2 with flag 2, the event time following as
// varint(seconds) uvarint(nanoseconds), the version 1 field 0. A version
// of its own, because a binary that knows version 2 but not the flag read
// those fields as the payload's first bytes; one that does not know
// version 3 refuses the record. (Version 2 with flag 2, as 20b53a3 wrote,
// is read too.) Other records stay version 1 or 2, byte for byte.
const (
	dlqVersion      = 1
	dlqVersionTrunc = 2
	dlqVersionWide  = 3
	dlqFlagTrunc    = 1
	dlqFlagWideTime = 2
	maxErrorBytes   = 16 << 10
)

// narrowTime reports whether t (not zero) is written as its UnixNano.
func narrowTime(t time.Time) bool {
	ns := t.UnixNano()
	return ns != 0 && time.Unix(0, ns).Equal(t)
}

func encodeDeadLetter(d *DeadLetter) []byte {
	e := d.Error
	if len(e) > maxErrorBytes {
		e = e[:maxErrorBytes] + "…(truncated)"
	}
	b := make([]byte, 0, 64+len(e)+len(d.Payload))
	var flags uint64
	if d.Truncated {
		flags |= dlqFlagTrunc
	}
	if !d.EventTime.IsZero() && !narrowTime(d.EventTime) {
		flags |= dlqFlagWideTime
	}
	switch {
	case flags&dlqFlagWideTime != 0:
		b = append(b, dlqVersionWide)
	case flags != 0:
		b = append(b, dlqVersionTrunc)
	default:
		b = append(b, dlqVersion)
	}
	b = binenc.AppendString(b, d.Input)
	b = binenc.AppendString(b, d.EventID)
	b = binenc.AppendString(b, e)
	b = binary.AppendUvarint(b, uint64(d.Attempts))
	b = binary.AppendVarint(b, d.Time.UnixNano())
	var et int64
	if !d.EventTime.IsZero() && flags&dlqFlagWideTime == 0 {
		et = d.EventTime.UnixNano()
	}
	b = binary.AppendVarint(b, et)
	b = binenc.AppendString(b, d.TraceID)
	b = binary.AppendUvarint(b, uint64(len(d.Keys)))
	for _, kv := range d.Keys {
		b = binenc.AppendString(b, kv.Name)
		b = binenc.AppendString(b, kv.Value)
	}
	if flags != 0 {
		b = binary.AppendUvarint(b, flags)
		b = binary.AppendUvarint(b, uint64(d.PayloadBytes))
		if flags&dlqFlagWideTime != 0 {
			b = binary.AppendVarint(b, d.EventTime.Unix())
			b = binary.AppendUvarint(b, uint64(d.EventTime.Nanosecond()))
		}
	}
	return append(b, d.Payload...)
}

func decodeDeadLetter(flowletName string, b []byte) (DeadLetter, error) {
	d := DeadLetter{Flowlet: flowletName}
	if len(b) == 0 || b[0] < dlqVersion || b[0] > dlqVersionWide {
		return d, errors.New("runtime: unknown dead-letter record version")
	}
	r := binenc.NewReader(b[1:], errBadEnvelope)
	d.Input = r.String()
	d.EventID = r.String()
	d.Error = r.String()
	d.Attempts = int(r.Uvarint())
	t := r.Varint()
	d.Time = time.Unix(0, t)
	if et := r.Varint(); et != 0 {
		d.EventTime = time.Unix(0, et)
	}
	d.TraceID = r.String()
	n := r.Uvarint()
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		d.Keys = append(d.Keys, flowlet.KeyValue{Name: r.String(), Value: r.String()})
	}
	if b[0] != dlqVersion {
		flags := r.Uvarint()
		d.Truncated = flags&dlqFlagTrunc != 0
		d.PayloadBytes = int(r.Uvarint())
		if flags&dlqFlagWideTime != 0 {
			sec := r.Varint()
			ns := r.Uvarint()
			if ns >= 1e9 {
				return d, errBadEnvelope
			}
			d.EventTime = time.Unix(sec, int64(ns))
		}
	}
	if err := r.Err(); err != nil {
		return d, err
	}
	d.Payload = append([]byte(nil), r.Rest()...)
	return d, nil
}
