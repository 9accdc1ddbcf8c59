package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// timeEmitter emits with the event time at, ignoring Emit's error.
type timeEmitter struct {
	at  time.Time
	err error
}

func (e *timeEmitter) ProcessBatch(ctx flowlet.Context, _ []flowlet.Event) error {
	e.err = ctx.Emit("out", []byte("x"), flowlet.EventTime(e.at))
	return nil
}

// TestEventTimeOutsideTheWire: an emit's event time travels to the host
// as int64 nanoseconds since the epoch, 0 meaning none. A time outside
// 1678–2262 was sent as whatever UnixNano's overflow gave, and the epoch
// itself as none, silently; in process both are kept. Such an emit is now
// refused, and fails the step even when the flowlet ignores the error.
func TestEventTimeOutsideTheWire(t *testing.T) {
	for _, at := range []time.Time{time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1066, 10, 14, 0, 0, 0, 0, time.UTC), time.Unix(0, 0)} {
		e := &timeEmitter{at: at}
		s := initedServer(t, "t", e)
		r, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if e.err == nil || !strings.Contains(e.err.Error(), "event time") || r.GetError() == nil || r.GetPackedEmits() != nil {
			t.Errorf("event time %v: Emit %v, step error %v, emits %v; want the emit refused and the step failed", at, e.err, r.GetError(), r.GetPackedEmits())
		}
	}
	// Within the range, the time travels.
	at := time.Date(2024, 1, 31, 12, 0, 0, 5, time.UTC)
	e := &timeEmitter{at: at}
	s := initedServer(t, "t", e)
	r, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: 1}})
	if err != nil || r.GetError() != nil || e.err != nil || len(r.GetPackedEmits().GetEventTimes()) != 1 || r.GetPackedEmits().GetEventTimes()[0] != at.UnixNano() {
		t.Errorf("event time %v: %v %v %v", at, err, r.GetError(), r.GetPackedEmits().GetEventTimes())
	}
}
