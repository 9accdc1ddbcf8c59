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
	w := &waiter{}
	s := initedServer(t, "waiter", w)
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

// panicker keeps the Done channel of each Process call and panics on the
// event "panic".
type panicker struct{ dones []<-chan struct{} }

func (p *panicker) Process(ctx flowlet.Context, ev flowlet.Event) error {
	p.dones = append(p.dones, ctx.Done())
	if string(ev.Payload) == "panic" {
		panic("boom")
	}
	return nil
}

// TestDoneClosesAfterPanic: a step that panics (recovered by the SDK)
// still closes the Done channels it gave, and the next step's is another,
// open during that step and closed after it.
func TestDoneClosesAfterPanic(t *testing.T) {
	p := &panicker{}
	s := initedServer(t, "panicker", p)
	batch := func(id uint64, payloads ...string) *pb.StepResponse {
		req := &pb.BatchRequest{Step: &pb.StepRequest{CallId: id}}
		for _, pl := range payloads {
			req.Events = append(req.Events, &pb.Event{Id: pl, Payload: []byte(pl)})
		}
		r, err := s.ProcessBatch(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := batch(1, "a", "panic"); r.GetError().GetKind() != pb.Error_PANIC {
		t.Fatalf("step 1: %v, want the panic", r.GetError())
	}
	if r := batch(2, "b"); r.GetError() != nil {
		t.Fatalf("step 2: %v", r.GetError())
	}
	if len(p.dones) != 3 || p.dones[2] == p.dones[0] {
		t.Fatalf("Done channels %v: want 3, step 2's another than step 1's", p.dones)
	}
	for i, d := range p.dones {
		select {
		case <-d:
		default:
			t.Errorf("call %d: its Done channel is still open after its step", i)
		}
	}
}

// initedServer is a server of f (every instance is f), initialized as the
// only instance of flowlet name, its log discarded.
func initedServer(t *testing.T, name string, f flowlet.Flowlet) *server {
	t.Helper()
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devnull.Close() })
	s := newServer(nil, func() flowlet.Flowlet { return f }, flowlet.TypeInfo{}, devnull)
	if _, err := s.Init(context.Background(), &pb.InitRequest{Name: name, Instances: 1}); err != nil {
		t.Fatal(err)
	}
	return s
}
