package flowlettest

import (
	"context"
	"errors"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

// waiter keeps its step's Done channel and a context derived from its
// Context, as a goroutine of the step waiting on them would.
type waiter struct {
	done    <-chan struct{}
	derived context.Context
	stop    context.CancelFunc
	during  error
}

func (w *waiter) Process(ctx flowlet.Context, _ flowlet.Event) error {
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

// TestDoneClosesWhenStepEnds: as in the runtime, the Done channel a step's
// Context gives during the step, and the contexts derived from it, are
// closed once the step returned, with flowlet.ErrStepEnded as the cause, so
// that a goroutine of the step waiting on them ends. They stayed open (the
// Done of context.Background: nil), so such a goroutine waited forever in
// the tests while it ends in the runtime.
func TestDoneClosesWhenStepEnds(t *testing.T) {
	ctx := New("w")
	w := &waiter{}
	if err := ctx.Process(w, Event("a")); err != nil {
		t.Fatal(err)
	}
	defer w.stop()
	if w.during != nil {
		t.Fatal(w.during)
	}
	select {
	case <-w.done:
	default:
		t.Error("the Done channel given during the step is still open after it")
	}
	if cause := context.Cause(w.derived); !errors.Is(cause, flowlet.ErrStepEnded) {
		t.Errorf("a derived context's cause is %v, want flowlet.ErrStepEnded", cause)
	}
}
