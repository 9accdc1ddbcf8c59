package runtime

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/flowrun/flowrun/flowlet"
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
		dst = appendString(dst, kv.Name)
		dst = appendString(dst, kv.Value)
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
		r := reader{b: b[1:]}
		n := r.uvarint()
		for i := uint64(0); i < n && r.err == nil; i++ {
			name := r.string()
			value := r.string()
			keys = append(keys, flowlet.KeyValue{Name: name, Value: value})
		}
		if r.err != nil {
			return keys, nil, r.err
		}
		return keys, r.b, nil
	}
	return keys, nil, errBadEnvelope
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 { return readVarint(r, binary.Uvarint) }

func (r *reader) varint() int64 { return readVarint(r, binary.Varint) }

// readVarint reads one number with decode (binary.Uvarint or binary.Varint).
func readVarint[T uint64 | int64](r *reader, decode func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := decode(r.b)
	if n <= 0 {
		r.err = errBadEnvelope
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) string() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(len(r.b)) {
		r.err = errBadEnvelope
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
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
	Keys []flowlet.KeyValue `json:"keys,omitempty"`
	// EventTime and TraceID are the event's headers.
	EventTime time.Time `json:"event_time,omitzero"`
	TraceID   string    `json:"trace_id,omitempty"`
	// Payload is the event's payload (a source may store only a prefix).
	Payload []byte `json:"-"`
}

const (
	dlqVersion    = 1
	maxErrorBytes = 16 << 10
)

func encodeDeadLetter(d *DeadLetter) []byte {
	e := d.Error
	if len(e) > maxErrorBytes {
		e = e[:maxErrorBytes] + "…(truncated)"
	}
	b := make([]byte, 0, 64+len(e)+len(d.Payload))
	b = append(b, dlqVersion)
	b = appendString(b, d.Input)
	b = appendString(b, d.EventID)
	b = appendString(b, e)
	b = binary.AppendUvarint(b, uint64(d.Attempts))
	b = binary.AppendVarint(b, d.Time.UnixNano())
	var et int64
	if !d.EventTime.IsZero() {
		et = d.EventTime.UnixNano()
	}
	b = binary.AppendVarint(b, et)
	b = appendString(b, d.TraceID)
	b = binary.AppendUvarint(b, uint64(len(d.Keys)))
	for _, kv := range d.Keys {
		b = appendString(b, kv.Name)
		b = appendString(b, kv.Value)
	}
	return append(b, d.Payload...)
}

func decodeDeadLetter(flowletName string, b []byte) (DeadLetter, error) {
	d := DeadLetter{Flowlet: flowletName}
	if len(b) == 0 || b[0] != dlqVersion {
		return d, errors.New("runtime: unknown dead-letter record version")
	}
	r := reader{b: b[1:]}
	d.Input = r.string()
	d.EventID = r.string()
	d.Error = r.string()
	d.Attempts = int(r.uvarint())
	t := r.varint()
	d.Time = time.Unix(0, t)
	if et := r.varint(); et != 0 {
		d.EventTime = time.Unix(0, et)
	}
	d.TraceID = r.string()
	n := r.uvarint()
	for i := uint64(0); i < n && r.err == nil; i++ {
		d.Keys = append(d.Keys, flowlet.KeyValue{Name: r.string(), Value: r.string()})
	}
	if r.err != nil {
		return d, r.err
	}
	d.Payload = append([]byte(nil), r.b...)
	return d, nil
}
