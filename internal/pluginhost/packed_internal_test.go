package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet/flowlettest"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// TestPackedHeaderColumns: each header column of packed emits is "per
// emit, or empty when no emit sets it" (flowlet.proto), independently of
// the others, as a plugin of another SDK may send them. The host applied
// trace ids and priorities only with event times, and indexed them when
// event times were there: a plugin without them crashed the host process.
func TestPackedHeaderColumns(t *testing.T) {
	in := &inst{name: "f"}
	for name, c := range map[string]struct {
		p     *pb.PackedEmits
		at    int64
		trace string
		prio  uint8
	}{
		"event times only": {&pb.PackedEmits{EventTimes: []int64{5}}, 5, "", 0},
		"no trace ids":     {&pb.PackedEmits{EventTimes: []int64{5}, Priorities: []uint32{1}}, 5, "", 1},
		"no priorities":    {&pb.PackedEmits{EventTimes: []int64{5}, TraceIds: []string{"t"}}, 5, "t", 0},
		"no event times":   {&pb.PackedEmits{TraceIds: []string{"t"}, Priorities: []uint32{1}}, 0, "t", 1},
		"priorities only":  {&pb.PackedEmits{Priorities: []uint32{2}}, 0, "", 2},
	} {
		p := c.p
		p.Outputs, p.OutputIndex, p.Payloads, p.PayloadEnds = []string{"out"}, []uint32{0}, []byte("x"), []uint32{1}
		ctx := flowlettest.New("f")
		if err := in.emitPacked(ctx, p); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		ctx.Commit()
		got := ctx.Emitted()
		var at time.Time
		if c.at != 0 {
			at = time.Unix(0, c.at)
		}
		if len(got) != 1 || !got[0].EventTime.Equal(at) || got[0].TraceID != c.trace || got[0].Priority != c.prio {
			t.Errorf("%s: emitted %+v, want event time %v, trace %q, priority %d", name, got, at, c.trace, c.prio)
		}
	}
}

// TestEmitPriorityBeyondQueueRange: a queue's priorities are 0..255
// (queue.Event.Priority is a uint8); the wire carries a uint32. A plugin
// of another SDK sending 256 had its emit land at priority 0 (uint8 cut):
// it is refused as a *ResponseError, packed or not.
func TestEmitPriorityBeyondQueueRange(t *testing.T) {
	in := &inst{name: "f"}
	for _, prio := range []uint32{256, 300, 1 << 31} {
		packed := &pb.PackedEmits{Outputs: []string{"out"}, OutputIndex: []uint32{0}, Payloads: []byte("x"), PayloadEnds: []uint32{1}, Priorities: []uint32{prio}}
		ctx := flowlettest.New("f")
		var re *ResponseError
		if err := in.emitPacked(ctx, packed); !errors.As(err, &re) || !strings.Contains(err.Error(), fmt.Sprint(prio)) {
			t.Errorf("packed priority %d: %v, want a *ResponseError naming it", prio, err)
		}
		if err := in.emitEach(ctx, []*pb.Emit{{Output: "out", Payload: []byte("x"), Priority: prio}}); !errors.As(err, &re) {
			t.Errorf("priority %d: %v, want a *ResponseError", prio, err)
		}
		ctx.Commit()
		if got := ctx.Emitted(); len(got) != 0 {
			t.Errorf("priority %d: emitted %+v", prio, got)
		}
	}
	ctx := flowlettest.New("f")
	if err := in.emitEach(ctx, []*pb.Emit{{Output: "out", Payload: []byte("x"), Priority: 255}}); err != nil {
		t.Fatal(err)
	}
	ctx.Commit()
	if got := ctx.Emitted(); len(got) != 1 || got[0].Priority != 255 {
		t.Errorf("priority 255: emitted %+v", got)
	}
}

// TestHostScanPageByteBound: a plugin's Scan page is bounded in bytes as
// well as entries: a page of the default 512 entries of a table of large
// values (512 of 1 MiB: past plugin.MaxMessageSize, 256 MiB) was built
// whole in the host and could not be sent, so such a table could not be
// scanned. The SDK goes on after a page's last key (More), so a shorter
// page loses nothing.
func TestHostScanPageByteBound(t *testing.T) {
	const values, size = 48, 512 << 10 // 24 MiB
	ctx := flowlettest.New("f")
	for i := range values {
		if err := ctx.State("t").Put(fmt.Appendf(nil, "k%03d", i), make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	in := &inst{name: "f"}
	in.cb.ctx, in.cb.id = ctx, 7
	h := &hostServer{in: in}
	req := &pb.ScanRequest{CallId: 7, Name: "t", Limit: maxScanPage}
	got := 0
	for page := 0; ; page++ {
		resp, err := h.Scan(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		bytes := 0
		for _, e := range resp.Entries {
			bytes += len(e.Key) + len(e.Value)
		}
		if len(resp.Entries) == 0 || bytes > maxScanPageBytes+size {
			t.Fatalf("page %d: %d entries, %d bytes; want some, at most %d", page, len(resp.Entries), bytes, maxScanPageBytes+size)
		}
		got += len(resp.Entries)
		if !resp.More {
			break
		}
		req.HasStart, req.Start = true, append(resp.Entries[len(resp.Entries)-1].Key, 0)
	}
	if got != values {
		t.Fatalf("%d entries over the pages, want %d", got, values)
	}
}
