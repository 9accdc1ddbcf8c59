package plugin

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// waiter keeps its step's Done channel and a context derived from its
// Context, as a goroutine of the step waiting on them would.
type waiter struct {
	done    <-chan struct{}
	derived context.Context
	stop    context.CancelFunc
	during  error // what they said during the step
}

func (w *waiter) ProcessBatch(ctx flowlet.Context, _ []flowlet.Event) error {
	w.done = ctx.Done()
	w.derived, w.stop = context.WithCancel(ctx)
	select {
	case <-w.done:
		w.during = errors.New("Done is closed during the step")
	default:
		w.during = w.derived.Err()
	}
	return nil
}

// TestDoneClosesWhenStepEnds: the Done channel a step's Context gives
// during the step, and the contexts derived from it, are closed once the
// step returned, as in the runtime (ErrStepEnded is the cause), so that a
// goroutine of the step waiting on them ends. Over the step channel or the
// Steps stream (whose context lasts as long as the process) they stayed
// open: such goroutines waited forever, one more each step.
func TestDoneClosesWhenStepEnds(t *testing.T) {
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	w := &waiter{}
	s := newServer(nil, func() flowlet.Flowlet { return w }, flowlet.TypeInfo{}, devnull)
	if _, err := s.Init(context.Background(), &pb.InitRequest{Name: "waiter", Instances: 1}); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 2; id++ {
		// The channel's context: not cancelled when a step ends.
		if _, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: id}}); err != nil {
			t.Fatal(err)
		}
		defer w.stop()
		if w.during != nil {
			t.Fatalf("step %d: %v", id, w.during)
		}
		select {
		case <-w.done:
		default:
			t.Errorf("step %d: the Done channel given during the step is still open after it", id)
		}
		// Derived from the call's own cancelable context (found through
		// Value), it is cancelled with it, synchronously.
		if cause := context.Cause(w.derived); !errors.Is(cause, flowlet.ErrStepEnded) {
			t.Errorf("step %d: a derived context's cause is %v, want flowlet.ErrStepEnded", id, cause)
		}
	}
}
