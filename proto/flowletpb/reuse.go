package flowletpb

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Reuse of decoded messages: a step channel's end decodes every frame into
// the same message with proto.UnmarshalOptions{Merge: true} after
// resetting it with ResetForReuse, so the packed columns' slices keep their
// capacity from step to step instead of being allocated again. (Bytes and
// strings are still copied out of the frame by protobuf.)

// maxKeptElems bounds the capacity of a column kept for the next message.
const maxKeptElems = 1 << 20

func keep[T any](s []T) []T {
	if cap(s) > maxKeptElems {
		return nil
	}
	clear(s) // drop references (strings, messages) of the previous message
	return s[:0]
}

// ResetForReuse clears r as proto.Reset does, except that r.PackedEmits,
// when set, stays (cleared) with its columns' capacity, so a message that
// has no packed emits decodes with an empty PackedEmits instead of nil
// (the two mean the same).
func (r *StepResponse) ResetForReuse() {
	pe := r.PackedEmits
	*r = StepResponse{}
	if pe != nil {
		*pe = PackedEmits{
			Outputs: keep(pe.Outputs), OutputIndex: keep(pe.OutputIndex), PayloadEnds: keep(pe.PayloadEnds),
			KeyNames: keep(pe.KeyNames), KeyCounts: keep(pe.KeyCounts), KeyNameIndex: keep(pe.KeyNameIndex),
			KeyValueEnds: keep(pe.KeyValueEnds), EventTimes: keep(pe.EventTimes), TraceIds: keep(pe.TraceIds),
			Priorities: keep(pe.Priorities),
		}
		r.PackedEmits = pe
	}
}

// ResetForReuse clears c as proto.Reset does, except that c.Batch, when
// set, stays (cleared) with its packed columns' capacity (CallDecoder).
func (c *StepCall) ResetForReuse() {
	b := c.Batch
	*c = StepCall{}
	if b == nil {
		return
	}
	p := b.Packed
	*b = BatchRequest{}
	if p != nil {
		*p = PackedEvents{
			PayloadEnds: keep(p.PayloadEnds), IdEnds: keep(p.IdEnds), Inputs: keep(p.Inputs),
			InputIndex: keep(p.InputIndex), EventTimes: keep(p.EventTimes), TraceIds: keep(p.TraceIds),
			Keys: keep(p.Keys),
		}
		b.Packed = p
	}
	c.Batch = b
}

// ResponseDecoder decodes StepResponses into a message reused from step to
// step (a step channel's host end).
type ResponseDecoder struct {
	rest []byte // the fields other than the packed emits
}

// Decode decodes the StepResponse m into r, replacing what r held, as
// proto.Unmarshal does, except for its packed emits (field 5), which it
// decodes itself into r.PackedEmits, reusing the capacity of its columns
// (ResetForReuse), with Payloads and KeyValues as slices of m instead of
// copies: they are valid only as long as m is. Every other field, unknown
// ones included, goes through proto.Unmarshal. A packed emits field that
// appears more than once is merged as protobuf does (repeated fields
// appended, bytes replaced); a field of the packed emits with an unexpected
// wire type is skipped (protobuf keeps it as an unknown field, which the
// host never reads). r.PackedEmits is set (empty) after a message without
// packed emits when it was before: the two mean the same.
func (d *ResponseDecoder) Decode(m []byte, r *StepResponse) error {
	r.ResetForReuse()
	pe := r.PackedEmits
	r.PackedEmits = nil
	rest := d.rest[:0]
	for b := m; len(b) > 0; {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		vlen := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vlen < 0 {
			return protowire.ParseError(vlen)
		}
		if num == 5 && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			if pe == nil {
				pe = new(PackedEmits)
			}
			if err := pe.decode(v); err != nil {
				return err
			}
		} else {
			rest = append(rest, b[:n+vlen]...)
		}
		b = b[n+vlen:]
	}
	if len(rest) > 0 {
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(rest, r); err != nil {
			return err
		}
	}
	r.PackedEmits = pe
	if cap(rest) <= maxKeptElems {
		d.rest = rest
	}
	return nil
}

// consumeTag is protowire.ConsumeTag that, like proto.Unmarshal, also
// refuses field numbers outside 1..MaxValidNumber.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && (num < protowire.MinValidNumber || num > protowire.MaxValidNumber) {
		return 0, 0, -1
	}
	return num, typ, n
}

// decode merges the encoded PackedEmits m into p.
func (p *PackedEmits) decode(m []byte) error {
	return walkFields(m, func(num protowire.Number, typ protowire.Type, m []byte) (n int, err error) {
		switch {
		case typ == protowire.BytesType && (num == 1 || num == 5 || num == 11):
			v, k := protowire.ConsumeBytes(m)
			if k < 0 {
				return 0, protowire.ParseError(k)
			}
			if !utf8.Valid(v) {
				return 0, fmt.Errorf("string field flowlet.PackedEmits.%d contains invalid UTF-8", num)
			}
			switch num {
			case 1:
				p.Outputs = append(p.Outputs, string(v))
			case 5:
				p.KeyNames = append(p.KeyNames, string(v))
			default:
				p.TraceIds = append(p.TraceIds, string(v))
			}
			return k, nil
		case typ == protowire.BytesType && (num == 3 || num == 8):
			v, k := protowire.ConsumeBytes(m)
			if k < 0 {
				return 0, protowire.ParseError(k)
			}
			if num == 3 {
				p.Payloads = v[:len(v):len(v)]
			} else {
				p.KeyValues = v[:len(v):len(v)]
			}
			return k, nil
		case num == 2:
			p.OutputIndex, n, err = appendUint32s(p.OutputIndex, m, typ)
		case num == 4:
			p.PayloadEnds, n, err = appendUint32s(p.PayloadEnds, m, typ)
		case num == 6:
			p.KeyCounts, n, err = appendUint32s(p.KeyCounts, m, typ)
		case num == 7:
			p.KeyNameIndex, n, err = appendUint32s(p.KeyNameIndex, m, typ)
		case num == 9:
			p.KeyValueEnds, n, err = appendUint32s(p.KeyValueEnds, m, typ)
		case num == 12:
			p.Priorities, n, err = appendUint32s(p.Priorities, m, typ)
		case num == 10 && (typ == protowire.BytesType || typ == protowire.VarintType):
			n, err = appendInt64s(&p.EventTimes, m, typ)
		default:
			n = -1
		}
		return n, err
	})
}

// walkFields calls field for every field of the encoded message m with the
// bytes after its tag; field returns how many of them it consumed, or n < 0
// to have the field skipped (unknown, or a known field of another wire
// type: protobuf keeps those as unknown fields, which the host never reads).
func walkFields(m []byte, field func(num protowire.Number, typ protowire.Type, m []byte) (int, error)) error {
	for len(m) > 0 {
		num, typ, n := consumeTag(m)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m = m[n:]
		n, err := field(num, typ, m)
		if err != nil {
			return err
		}
		if n < 0 {
			if n = protowire.ConsumeFieldValue(num, typ, m); n < 0 {
				return protowire.ParseError(n)
			}
		}
		m = m[n:]
	}
	return nil
}

// appendUint32s appends a repeated uint32 field's value at m (packed or
// not) to s; n < 0 (without an error) for another wire type.
func appendUint32s(s []uint32, m []byte, typ protowire.Type) ([]uint32, int, error) {
	switch typ {
	case protowire.VarintType:
		v, n := protowire.ConsumeVarint(m)
		if n < 0 {
			return s, 0, protowire.ParseError(n)
		}
		return append(s, uint32(v)), n, nil
	case protowire.BytesType:
		b, n := protowire.ConsumeBytes(m)
		if n < 0 {
			return s, 0, protowire.ParseError(n)
		}
		for len(b) > 0 {
			if b[0] < 0x80 {
				s = append(s, uint32(b[0]))
				b = b[1:]
				continue
			}
			v, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return s, 0, protowire.ParseError(k)
			}
			s = append(s, uint32(v))
			b = b[k:]
		}
		return s, n, nil
	}
	return s, -1, nil
}

// appendInt64s is appendUint32s for a repeated int64 field.
func appendInt64s(s *[]int64, m []byte, typ protowire.Type) (int, error) {
	if typ == protowire.VarintType {
		v, n := protowire.ConsumeVarint(m)
		if n < 0 {
			return 0, protowire.ParseError(n)
		}
		*s = append(*s, int64(v))
		return n, nil
	}
	b, n := protowire.ConsumeBytes(m)
	if n < 0 {
		return 0, protowire.ParseError(n)
	}
	for len(b) > 0 {
		v, k := protowire.ConsumeVarint(b)
		if k < 0 {
			return 0, protowire.ParseError(k)
		}
		*s = append(*s, int64(v))
		b = b[k:]
	}
	return n, nil
}

// CallDecoder decodes StepCalls into a message reused from step to step
// (a step channel's plugin end).
type CallDecoder struct {
	rest, batchRest []byte        // the fields decoded by proto.Unmarshal
	batch           *BatchRequest // kept while a call has no batch
}

// Decode decodes the StepCall m into c, replacing what c held, as
// proto.Unmarshal does, except for the packed events of its batch, which it
// decodes itself into c.Batch.Packed, reusing the capacity of its columns,
// with Payloads and Ids as slices of m instead of copies: they are valid
// only as long as m is. Every other field, unknown ones included, goes
// through proto.Unmarshal (and each of the packed events' keys). c.Batch is
// nil when m has no batch; a batch's Packed is set (empty) when the batch
// has none. Fields given more than once are merged as protobuf does; a
// field of the packed events with an unexpected wire type is skipped.
func (d *CallDecoder) Decode(m []byte, c *StepCall) error {
	if c.Batch == nil {
		c.Batch = d.batch
	}
	c.ResetForReuse()
	b := c.Batch
	c.Batch = nil
	if b == nil {
		b = new(BatchRequest)
	}
	d.batch = b
	p := b.Packed
	b.Packed = nil
	if p == nil {
		p = new(PackedEvents)
	}
	rest, brest := d.rest[:0], d.batchRest[:0]
	seen := false
	for m := m; len(m) > 0; {
		num, typ, n := consumeTag(m)
		if n < 0 {
			return protowire.ParseError(n)
		}
		vlen := protowire.ConsumeFieldValue(num, typ, m[n:])
		if vlen < 0 {
			return protowire.ParseError(vlen)
		}
		if num != 3 || typ != protowire.BytesType {
			rest = append(rest, m[:n+vlen]...)
			m = m[n+vlen:]
			continue
		}
		seen = true
		v, _ := protowire.ConsumeBytes(m[n:])
		for len(v) > 0 { // the batch's fields
			bnum, btyp, k := consumeTag(v)
			if k < 0 {
				return protowire.ParseError(k)
			}
			blen := protowire.ConsumeFieldValue(bnum, btyp, v[k:])
			if blen < 0 {
				return protowire.ParseError(blen)
			}
			if bnum == 3 && btyp == protowire.BytesType {
				pv, _ := protowire.ConsumeBytes(v[k:])
				if err := p.decode(pv); err != nil {
					return err
				}
			} else {
				brest = append(brest, v[:k+blen]...)
			}
			v = v[k+blen:]
		}
		m = m[n+vlen:]
	}
	if len(rest) > 0 {
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(rest, c); err != nil {
			return err
		}
	}
	if seen {
		if len(brest) > 0 {
			if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(brest, b); err != nil {
				return err
			}
		}
		b.Packed = p
		c.Batch = b
	} else {
		b.Packed = p // kept for the next call
	}
	if cap(rest) <= maxKeptElems {
		d.rest = rest
	}
	if cap(brest) <= maxKeptElems {
		d.batchRest = brest
	}
	return nil
}

// decode merges the encoded PackedEvents m into p.
func (p *PackedEvents) decode(m []byte) error {
	return walkFields(m, func(num protowire.Number, typ protowire.Type, m []byte) (n int, err error) {
		switch {
		case typ == protowire.BytesType && (num == 5 || num == 8):
			v, k := protowire.ConsumeBytes(m)
			if k < 0 {
				return 0, protowire.ParseError(k)
			}
			if !utf8.Valid(v) {
				return 0, fmt.Errorf("string field flowlet.PackedEvents.%d contains invalid UTF-8", num)
			}
			if num == 5 {
				p.Inputs = append(p.Inputs, string(v))
			} else {
				p.TraceIds = append(p.TraceIds, string(v))
			}
			return k, nil
		case typ == protowire.BytesType && (num == 1 || num == 3):
			v, k := protowire.ConsumeBytes(m)
			if k < 0 {
				return 0, protowire.ParseError(k)
			}
			if num == 1 {
				p.Payloads = v[:len(v):len(v)]
			} else {
				p.Ids = v[:len(v):len(v)]
			}
			return k, nil
		case typ == protowire.BytesType && num == 9:
			v, k := protowire.ConsumeBytes(m)
			if k < 0 {
				return 0, protowire.ParseError(k)
			}
			ek := new(EventKeys)
			if err := proto.Unmarshal(v, ek); err != nil {
				return 0, err
			}
			p.Keys = append(p.Keys, ek)
			return k, nil
		case num == 2:
			p.PayloadEnds, n, err = appendUint32s(p.PayloadEnds, m, typ)
		case num == 4:
			p.IdEnds, n, err = appendUint32s(p.IdEnds, m, typ)
		case num == 6:
			p.InputIndex, n, err = appendUint32s(p.InputIndex, m, typ)
		case num == 7 && (typ == protowire.BytesType || typ == protowire.VarintType):
			n, err = appendInt64s(&p.EventTimes, m, typ)
		default:
			n = -1
		}
		return n, err
	})
}
