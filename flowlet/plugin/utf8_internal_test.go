package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// textUser makes one call with text that is not UTF-8, ignoring its error.
type textUser struct {
	call string
	err  error
}

func (u *textUser) ProcessBatch(ctx flowlet.Context, _ []flowlet.Event) error {
	switch u.call {
	case "dead letter":
		u.err = ctx.(interface{ DeadLetter([]byte, string) error }).DeadLetter([]byte("\xff"), "bad line \xff")
	case "output":
		u.err = ctx.Emit("out\xff", nil)
	case "key name":
		u.err = ctx.Emit("out", nil, flowlet.Key("k\xff", "v"))
	case "error":
		return flowlet.Permanent(errors.New("bad line \xff"))
	case "panic":
		panic("bad line \xff")
	}
	return nil
}

// TestTextThatIsNotUTF8: the response's text fields are protobuf strings,
// which must be UTF-8. A dead letter's reason or a step's error (both often
// made from the payload; or a panic's value), or an output or key name,
// that was not made a response that could not be marshalled: the step
// channel ended and the step failed with "cannot send the step's
// response", not its own error or dead letter, at every retry. A reason or
// an error is now made valid (U+FFFD for the bad bytes); an emit with such
// a name is refused and fails the step.
func TestTextThatIsNotUTF8(t *testing.T) {
	for _, call := range []string{"dead letter", "output", "key name", "error", "panic"} {
		u := &textUser{call: call}
		s := initedServer(t, "t", u)
		r, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: 1, DeadLetter: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := proto.Marshal(r); err != nil {
			t.Errorf("%s: the response cannot be sent: %v", call, err)
		}
		if call == "error" || call == "panic" {
			if e := r.GetError(); e == nil || !strings.Contains(e.Message, "bad line \uFFFD") {
				t.Errorf("%s: step error %v, want its message made valid", call, e)
			}
			continue
		}
		if call == "dead letter" {
			if u.err != nil || r.GetError() != nil || len(r.DeadLetters) != 1 || r.DeadLetters[0].Reason != "bad line \uFFFD" {
				t.Errorf("%s: %v %v %v; want the reason made valid", call, u.err, r.GetError(), r.DeadLetters)
			}
			continue
		}
		if u.err == nil || !strings.Contains(u.err.Error(), "UTF-8") || r.GetError() == nil || r.GetPackedEmits() != nil {
			t.Errorf("%s: Emit %v, step error %v, emits %v; want the emit refused and the step failed", call, u.err, r.GetError(), r.GetPackedEmits())
		}
	}
}
