package pluginhost

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// FuzzApplyResponse applies whatever a plugin process could answer a step
// with (a StepResponse's bytes) to a batch of three events: the host must
// not panic, and what it refuses of the response is a typed error.
//
//	go test ./internal/pluginhost -run '^$' -fuzz FuzzApplyResponse -fuzztime 1m
func FuzzApplyResponse(f *testing.F) {
	packed := func(p *pb.PackedEmits) *pb.PackedEmits {
		p.Outputs, p.OutputIndex, p.Payloads, p.PayloadEnds = []string{"out"}, []uint32{0, 0}, []byte("xyz"), []uint32{1, 3}
		return p
	}
	for _, r := range []*pb.StepResponse{
		{},
		{Emits: []*pb.Emit{{Output: "out", Payload: []byte("p"), Keys: []*pb.KeyValue{{Name: "k", Value: "v"}}, EventTime: 5, TraceId: "t", Priority: 9}}},
		{Emits: []*pb.Emit{{Output: "out", Priority: 256}}},
		{PackedEmits: packed(&pb.PackedEmits{KeyNames: []string{"k"}, KeyNameIndex: []uint32{0, 0}, KeyValues: []byte("ab"), KeyValueEnds: []uint32{1, 2}, KeyCounts: []uint32{1, 1}})},
		{PackedEmits: packed(&pb.PackedEmits{EventTimes: []int64{1, 2}, TraceIds: []string{"a", "b"}, Priorities: []uint32{1, 1 << 20}})},
		{PackedEmits: packed(&pb.PackedEmits{KeyCounts: []uint32{1 << 31, 1 << 31}, KeyNameIndex: []uint32{0}, KeyValueEnds: []uint32{1}})},
		{Writes: []*pb.StateOp{{Kind: pb.StateOp_PUT, Name: "t", Key: []byte("k"), Value: []byte("v")}, {Kind: pb.StateOp_ADD, Name: "c", Key: []byte("k"), Delta: -3}, {Kind: 99}}},
		{DeadLetters: []*pb.DeadLetter{{HasEvent: true, Event: 2, Reason: "r"}, {HasEvent: true, Event: 1 << 31}, {Payload: []byte("x")}}},
		{Error: &pb.Error{Kind: pb.Error_FAILED, Message: "m", Events: []int32{-1, 1 << 30}, Permanent: true}},
		{Error: &pb.Error{Kind: pb.Error_PANIC, Message: "m", Stack: "s"}},
		{Error: &pb.Error{Kind: pb.Error_IDLE}},
		{Error: &pb.Error{Kind: 42}},
	} {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	p := &Plugin{opts: Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	evs := []flowlet.Event{{Input: "in", Payload: []byte("a")}, {Input: "in", Payload: []byte("b")}, {Input: "in", Payload: []byte("c")}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var resp pb.StepResponse
		if proto.Unmarshal(b, &resp) != nil {
			return
		}
		in := &inst{name: "f", p: p}
		ctx := flowlettest.New("f")
		err := in.apply(ctx, "ProcessBatch", &resp, evs)
		var se *StepError
		var re *ResponseError
		if err != nil && !errors.Is(err, flowlet.ErrIdle) && !errors.Is(err, flowlet.ErrEndOfInput) &&
			!errors.As(err, &se) && !errors.As(err, &re) && !strings.HasPrefix(err.Error(), "plugin state write") {
			t.Fatalf("untyped error %T %v", err, err)
		}
		ctx.Commit()
		want := len(resp.Emits) + len(resp.GetPackedEmits().GetOutputIndex())
		if se != nil {
			want = 0 // a failed step's emits are not applied
		}
		if (err == nil || se != nil) && len(ctx.Emitted()) != want {
			t.Fatalf("%d emitted of %d, error %v", len(ctx.Emitted()), want, err)
		}
	})
}

// FuzzLogWriter writes what a plugin could print on stderr to both of the
// host's line writers, split at any point: no panic, and the tail kept
// for error messages stays bounded (and valid UTF-8 when the input was).
func FuzzLogWriter(f *testing.F) {
	for _, s := range []string{"", "\n", "plain line\r\n", `{"level":"error","msg":"m","k":1}` + "\n", `{"@level":"warn","@message":"x"}`,
		"panic: boom\n\ngoroutine 1\n", "{not json\n", "é\xffà\n", strings.Repeat("é", maxTailLine) + "\n"} {
		f.Add([]byte(s), uint16(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint16) {
		lw := newLogWriter(slog.New(&recorder{}))
		at := min(int(cut), len(b))
		for _, w := range []io.Writer{lw, lw.sync()} {
			w.Write(b[:at])
			w.Write(b[at:])
			w.Write([]byte("\n"))
		}
		lines := strings.Split(lw.tail(), "\n")
		if len(lines) > tailLines {
			t.Fatalf("%d lines kept", len(lines))
		}
		for _, l := range lines {
			if len(l) > maxTailLine+32 {
				t.Fatalf("a kept line of %d bytes", len(l))
			}
			if utf8.Valid(b) && !utf8.ValidString(l) {
				t.Fatalf("kept line %q is not UTF-8", l)
			}
		}
	})
}

// FuzzHandshakeError classifies any start failure go-plugin could report
// with any stderr the plugin printed: a *HandshakeError or *StartError
// naming the flowlet and plugin, never a panic. (go-plugin's messages
// that make it wait a second for stderr are left to the seeds of
// TestHandshake*, to keep this fast.)
func FuzzHandshakeError(f *testing.F) {
	for _, s := range []string{"incompatible API version with plugin. Plugin version: 9, Client versions: [1]",
		"incompatible core API version with plugin", "timeout while waiting for plugin to start", "boom\nsecond line", ""} {
		f.Add(s, "This binary is a plugin. These are not meant to be executed directly.\n")
		f.Add(s, "some\nstderr\xff")
	}
	p := &Plugin{flowlet: "f", path: "./p", opts: Options{StartTimeout: time.Second}}
	f.Fuzz(func(t *testing.T, msg, stderr string) {
		if strings.Contains(msg, "Unrecognized remote plugin message") || strings.Contains(msg, "exited before we could connect") {
			if !strings.Contains(stderr, "This binary is a plugin") {
				return // would wait a second for stderr
			}
		}
		lw := newLogWriter(slog.New(&recorder{}))
		lw.Write([]byte(stderr))
		err := p.handshakeError(errors.New(msg), lw)
		var he *HandshakeError
		var se *StartError
		switch {
		case errors.As(err, &he):
			if he.Flowlet != "f" || he.Path != "./p" || he.Cause == "" {
				t.Fatalf("%#v", he)
			}
		case errors.As(err, &se):
			if se.Flowlet != "f" || se.Path != "./p" {
				t.Fatalf("%#v", se)
			}
		default:
			t.Fatalf("%T %v", err, err)
		}
		_ = err.Error()
	})
}
