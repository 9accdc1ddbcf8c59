package flowletpb

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func fullResponse(tag string) *StepResponse {
	return &StepResponse{
		Emits:       []*Emit{{Output: "o" + tag, Payload: []byte("p" + tag), Keys: []*KeyValue{{Name: "k", Value: tag}}, EventTime: 5, TraceId: "t", Priority: 2}},
		Writes:      []*StateOp{{Kind: StateOp_PUT, Name: "n", Key: []byte("k" + tag), Value: []byte("v")}},
		DeadLetters: []*DeadLetter{{Payload: []byte(tag), Reason: "r", HasEvent: true, Event: 3}},
		Error:       &Error{Kind: Error_PANIC, Message: "m" + tag, Stack: "s", Permanent: true, Events: []int32{1}},
		PackedEmits: &PackedEmits{Outputs: []string{"out", tag}, OutputIndex: []uint32{0, 1}, Payloads: []byte("ab" + tag), PayloadEnds: []uint32{1, 2},
			KeyNames: []string{"ip"}, KeyCounts: []uint32{1, 0}, KeyNameIndex: []uint32{0}, KeyValues: []byte("x"), KeyValueEnds: []uint32{1},
			EventTimes: []int64{1, 2}, TraceIds: []string{"a", tag}, Priorities: []uint32{0, 3}},
		CallId: 42,
	}
}

func fullCall(tag string) *StepCall {
	return &StepCall{Op: StepCall_PROCESS_BATCH, Step: &StepRequest{CallId: 1, DeadLetter: true},
		Batch: &BatchRequest{Step: &StepRequest{CallId: 7, DeadLetter: true, DeadLetterEvent: true},
			Events: []*Event{{Id: tag, Payload: []byte(tag)}},
			Packed: &PackedEvents{Payloads: []byte("ab" + tag), PayloadEnds: []uint32{1, 2}, Ids: []byte("ij"), IdEnds: []uint32{1, 2},
				Inputs: []string{"a", tag}, InputIndex: []uint32{0, 1}, EventTimes: []int64{1, 2}, TraceIds: []string{"t", tag},
				Keys: []*EventKeys{{Event: 1, Keys: []*KeyValue{{Name: "k", Value: tag}}}}}}}
}

// A message decoded with Merge after ResetForReuse equals one decoded
// fresh, whatever it held before.
func TestResetForReuse(t *testing.T) {
	resps := []*StepResponse{fullResponse("1"), {CallId: 3}, fullResponse("22"), {}, {Error: &Error{Kind: Error_IDLE}}, fullResponse("3")}
	var r StepResponse
	for i, m := range resps {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		r.ResetForReuse()
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(m).(*StepResponse)
		if want.PackedEmits == nil && r.PackedEmits != nil {
			want.PackedEmits = &PackedEmits{} // kept, empty: means the same
		}
		if !proto.Equal(&r, want) {
			t.Fatalf("%d: decoded %v, want %v", i, &r, m)
		}
	}
}

// CallDecoder.Decode gives what proto.Unmarshal gives, whatever the message
// held before, a batch given twice (merged) included; it rejects what
// proto.Unmarshal rejects.
func TestCallDecoder(t *testing.T) {
	var d CallDecoder
	var c StepCall
	check := func(name string, b []byte) {
		t.Helper()
		want := new(StepCall)
		werr := proto.Unmarshal(b, want)
		err := d.Decode(b, &c)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%s: Decode: %v, proto.Unmarshal: %v", name, err, werr)
		}
		if err != nil {
			c = StepCall{}
			return
		}
		if (c.Batch == nil) != (want.Batch == nil) {
			t.Fatalf("%s: batch %v, want %v", name, c.Batch, want.Batch)
		}
		if want.Batch != nil && want.Batch.Packed == nil {
			want.Batch.Packed = &PackedEvents{} // kept, empty: means the same
		}
		if !proto.Equal(&c, want) {
			t.Fatalf("%s: decoded %v, want %v", name, &c, want)
		}
	}
	calls := []*StepCall{fullCall("1"), {Op: StepCall_TICK, Step: &StepRequest{CallId: 9}}, fullCall("22"), {},
		{Op: StepCall_PROCESS_BATCH, Batch: &BatchRequest{}}, fullCall("3"), {Op: StepCall_PROCESS_BATCH, Batch: &BatchRequest{Step: &StepRequest{CallId: 4}}}}
	var all []byte
	for i, m := range calls {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		check(string(rune('a'+i)), b)
		all = append(all, b...)
	}
	check("concatenated", all) // every field given several times
	check("truncated", all[:len(all)-2])
	var bad []byte
	bad = protowire.AppendTag(bad, 3, protowire.BytesType)
	bad = protowire.AppendBytes(bad, protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType),
		protowire.AppendString(protowire.AppendTag(nil, 5, protowire.BytesType), "\xfe")))
	check("utf-8", bad)
}

// Decode gives what proto.Unmarshal gives, on messages from protobuf's
// encoder, on the unpacked form of repeated numbers, on a packed emits
// field given twice and with an unknown field inside it; it rejects what
// proto.Unmarshal rejects.
func TestResponseDecoder(t *testing.T) {
	var d ResponseDecoder
	var r StepResponse
	check := func(name string, b []byte) {
		t.Helper()
		want := new(StepResponse)
		werr := proto.Unmarshal(b, want)
		err := d.Decode(b, &r)
		if (err != nil) != (werr != nil) {
			t.Fatalf("%s: Decode: %v, proto.Unmarshal: %v", name, err, werr)
		}
		if err != nil {
			r = StepResponse{}
			return
		}
		if want.PackedEmits == nil && r.PackedEmits != nil {
			want.PackedEmits = &PackedEmits{}
		}
		if want.PackedEmits != nil {
			want.PackedEmits.ProtoReflect().SetUnknown(nil) // skipped by Decode
		}
		if !proto.Equal(&r, want) {
			t.Fatalf("%s: decoded %v, want %v", name, &r, want)
		}
	}
	for i, m := range []*StepResponse{fullResponse("1"), {CallId: 3}, fullResponse("22"), {}, {Error: &Error{Kind: Error_IDLE}},
		{PackedEmits: &PackedEmits{Outputs: []string{"out"}, OutputIndex: []uint32{0, 0, 0}, Payloads: []byte("abc"), PayloadEnds: []uint32{1, 300, 70000}}}} {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		check(string(rune('a'+i)), b)
	}

	// Unpacked numbers, two packed emits fields (merged), an unknown field
	// and a known one of another wire type inside.
	var pe []byte
	pe = protowire.AppendTag(pe, 1, protowire.BytesType)
	pe = protowire.AppendString(pe, "out")
	for _, f := range []protowire.Number{2, 4, 6, 7, 9, 12} {
		pe = protowire.AppendTag(pe, f, protowire.VarintType)
		pe = protowire.AppendVarint(pe, 1<<33+5)
	}
	pe = protowire.AppendTag(pe, 10, protowire.VarintType)
	pe = protowire.AppendVarint(pe, uint64(1<<64-7))
	pe = protowire.AppendTag(pe, 3, protowire.BytesType)
	pe = protowire.AppendBytes(pe, []byte("first"))
	pe = protowire.AppendTag(pe, 99, protowire.Fixed32Type)
	pe = protowire.AppendFixed32(pe, 7)
	pe = protowire.AppendTag(pe, 4, protowire.Fixed64Type)
	pe = protowire.AppendFixed64(pe, 7)
	var b []byte
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, 77)
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	b = protowire.AppendBytes(b, pe)
	full, _ := proto.Marshal(fullResponse("x"))
	b = append(b, full...)
	check("hand-made", b)

	// Malformed: truncated, bad UTF-8 in an output, a bad varint.
	check("truncated", b[:len(b)-3])
	var bad []byte
	bad = protowire.AppendTag(bad, 5, protowire.BytesType)
	bad = protowire.AppendBytes(bad, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff"))
	check("utf-8", bad)
	bad = protowire.AppendTag(nil, 5, protowire.BytesType)
	bad = protowire.AppendBytes(bad, protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0x80}))
	check("varint", bad)
	check("empty", nil)
}

// The hand-written decoders never panic and agree with proto.Unmarshal on
// whether any input is valid, and on what a valid one holds.
//
//	go test -run '^$' -fuzz FuzzResponseDecoder -fuzztime 30s ./proto/flowletpb
func FuzzResponseDecoder(f *testing.F) {
	for _, m := range []*StepResponse{fullResponse("1"), {CallId: 3}, {Error: &Error{Kind: Error_IDLE}}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	var d ResponseDecoder
	var r StepResponse
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(StepResponse)
		werr := proto.Unmarshal(b, want)
		err := d.Decode(b, &r)
		if (err != nil) != (werr != nil) {
			t.Fatalf("Decode: %v, proto.Unmarshal: %v", err, werr)
		}
		if err != nil {
			r = StepResponse{}
			return
		}
		if want.PackedEmits == nil && r.PackedEmits != nil {
			want.PackedEmits = &PackedEmits{}
		}
		if want.PackedEmits != nil {
			want.PackedEmits.ProtoReflect().SetUnknown(nil) // skipped by Decode
		}
		if !proto.Equal(&r, want) {
			t.Fatalf("decoded %v, want %v", &r, want)
		}
	})
}

// FuzzCallDecoder is FuzzResponseDecoder for step calls.
//
//	go test -run '^$' -fuzz FuzzCallDecoder -fuzztime 30s ./proto/flowletpb
func FuzzCallDecoder(f *testing.F) {
	for _, m := range []*StepCall{fullCall("1"), {Op: StepCall_TICK, Step: &StepRequest{CallId: 9}}} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	var d CallDecoder
	var c StepCall
	f.Fuzz(func(t *testing.T, b []byte) {
		want := new(StepCall)
		werr := proto.Unmarshal(b, want)
		err := d.Decode(b, &c)
		if (err != nil) != (werr != nil) {
			t.Fatalf("Decode: %v, proto.Unmarshal: %v", err, werr)
		}
		if err != nil {
			c = StepCall{}
			return
		}
		if want.Batch != nil && want.Batch.Packed == nil {
			want.Batch.Packed = &PackedEvents{}
		}
		if want.Batch != nil && want.Batch.Packed != nil {
			want.Batch.Packed.ProtoReflect().SetUnknown(nil)
		}
		if (c.Batch == nil) != (want.Batch == nil) || !proto.Equal(&c, want) {
			t.Fatalf("decoded %v, want %v", &c, want)
		}
	})
}
