package pluginhost

import (
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
