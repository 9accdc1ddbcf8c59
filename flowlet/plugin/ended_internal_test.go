package plugin

import (
	"context"
	"errors"
	"os"
	"testing"

	"google.golang.org/grpc"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// keeper keeps the Context of its last step and a table handle and an
// iterator opened in it, as a flowlet that misuses them later would.
type keeper struct {
	ctx flowlet.Context
	it  flowlet.Iterator
}

func (k *keeper) ProcessBatch(ctx flowlet.Context, _ []flowlet.Event) error {
	k.ctx = ctx
	k.it = ctx.State("t").Scan(flowlet.ScanOptions{})
	return ctx.Emit("out", []byte("in the step"))
}

// fakeHost answers state reads as the host does when it is asked within
// the step; like a gRPC client, it looks at the call's context.
type fakeHost struct{ pb.HostClient }

func (fakeHost) Get(ctx context.Context, _ *pb.GetRequest, _ ...grpc.CallOption) (*pb.GetResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &pb.GetResponse{}, nil
}

func (fakeHost) CounterGet(ctx context.Context, _ *pb.CounterGetRequest, _ ...grpc.CallOption) (*pb.CounterGetResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &pb.CounterGetResponse{}, nil
}

func (fakeHost) Scan(ctx context.Context, _ *pb.ScanRequest, _ ...grpc.CallOption) (*pb.ScanResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &pb.ScanResponse{Entries: []*pb.ScanEntry{{Key: []byte("a")}, {Key: []byte("b")}}}, nil
}

// TestContextAfterStep: a Context used after its step returned (kept in a
// field, used from Close or between steps) gives flowlet.ErrStepEnded for
// every call instead of a nil-pointer panic in its context.Context, or an
// emit or write that is silently dropped; nothing of it reaches the next
// step.
func TestContextAfterStep(t *testing.T) {
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	k := &keeper{}
	s := newServer(nil, func() flowlet.Flowlet { return k }, flowlet.TypeInfo{}, devnull)
	if _, err := s.Init(context.Background(), &pb.InitRequest{Name: "keeper", Instances: 1}); err != nil {
		t.Fatal(err)
	}
	s.host = fakeHost{}
	step := func(id uint64) *pb.StepResponse {
		t.Helper()
		r, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: id, DeadLetter: true, DeadLetterEvent: true}})
		if err != nil || r.Error != nil {
			t.Fatalf("step %d: %v %v", id, err, r.GetError())
		}
		return r
	}
	step(1)
	ctx, it := k.ctx, k.it
	if ctx.Err() == nil {
		t.Error("the context of an ended step is not done")
	}
	tbl, cnt := ctx.State("t"), ctx.Counters("c")
	_, _, getErr := tbl.Get([]byte("k"))
	_, cntErr := cnt.Get([]byte("k"))
	dl := ctx.(interface {
		DeadLetter([]byte, string) error
		DeadLetterEvent(flowlet.Event, string) error
	})
	for what, err := range map[string]error{
		"Emit":            ctx.Emit("out", []byte("late")),
		"Put":             tbl.Put([]byte("k"), []byte("v")),
		"Delete":          tbl.Delete([]byte("k")),
		"Get":             getErr,
		"Add":             cnt.Add([]byte("k"), 1),
		"counter Get":     cntErr,
		"DeadLetter":      dl.DeadLetter([]byte("late"), "late"),
		"DeadLetterEvent": dl.DeadLetterEvent(flowlet.Event{}, "late"),
	} {
		if !errors.Is(err, flowlet.ErrStepEnded) {
			t.Errorf("%s after the step: %v, want ErrStepEnded", what, err)
		}
	}
	fresh := tbl.Scan(flowlet.ScanOptions{})
	for name, it := range map[string]flowlet.Iterator{"an iterator of the step": it, "a scan after it": fresh} {
		if it.Next() || !errors.Is(it.Err(), flowlet.ErrStepEnded) {
			t.Errorf("%s: Err %v, want ErrStepEnded", name, it.Err())
		}
	}
	r := step(2)
	if n := len(r.GetPackedEmits().GetOutputIndex()); n != 1 || len(r.Writes) != 0 || len(r.DeadLetters) != 0 {
		t.Errorf("the next step carries %d emits, %d writes, %d dead letters; want only its own emit", n, len(r.Writes), len(r.DeadLetters))
	}
}

// An iterator's Key, Value and Count before the first Next are empty, as
// in the runtime, not an index-out-of-range panic (which the SDK would
// turn into a failed step).
func TestIteratorBeforeNext(t *testing.T) {
	s := newServer(nil, func() flowlet.Flowlet { return &keeper{} }, flowlet.TypeInfo{}, nil)
	s.host = fakeHost{}
	ctx := s.begin(context.Background(), &pb.StepRequest{CallId: 1})
	it, cit := ctx.State("t").Scan(flowlet.ScanOptions{}), ctx.Counters("n").Scan(flowlet.ScanOptions{})
	if it.Key() != nil || it.Value() != nil || cit.Key() != nil || cit.Count() != 0 {
		t.Fatal("an iterator before Next has a current entry")
	}
	if !it.Next() || string(it.Key()) != "a" {
		t.Fatalf("first key %q", it.Key())
	}
}

// lateUser uses, in each step, the Context it kept from the step before,
// and records what that gave.
type lateUser struct {
	kept flowlet.Context
	errs map[string]error
	done bool // the kept Context was done
}

func (l *lateUser) ProcessBatch(ctx flowlet.Context, _ []flowlet.Event) error {
	if k := l.kept; k != nil {
		dl := k.(interface {
			DeadLetter([]byte, string) error
		})
		l.errs = map[string]error{
			"Emit":       k.Emit("out", []byte("late")),
			"Put":        k.State("t").Put([]byte("k"), []byte("v")),
			"Add":        k.Counters("c").Add([]byte("k"), 1),
			"DeadLetter": dl.DeadLetter([]byte("late"), "late"),
		}
		l.done = k.Err() != nil
	}
	l.kept = ctx
	return ctx.Emit("out", []byte("own"))
}

// TestContextKeptIntoNextStep: a Context kept from an earlier call is
// ended in a later call too (the SDK reuses its buffers from call to
// call): its emits, writes and dead letters do not land in the step that
// runs then, and it is done.
func TestContextKeptIntoNextStep(t *testing.T) {
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	l := &lateUser{}
	s := newServer(nil, func() flowlet.Flowlet { return l }, flowlet.TypeInfo{}, devnull)
	if _, err := s.Init(context.Background(), &pb.InitRequest{Name: "late", Instances: 1}); err != nil {
		t.Fatal(err)
	}
	s.host = fakeHost{}
	for id := uint64(1); id <= 2; id++ {
		r, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: id, DeadLetter: true}})
		if err != nil || r.Error != nil {
			t.Fatalf("step %d: %v %v", id, err, r.GetError())
		}
		if n := len(r.GetPackedEmits().GetOutputIndex()); n != 1 || len(r.Writes) != 0 || len(r.DeadLetters) != 0 {
			t.Errorf("step %d carries %d emits, %d writes, %d dead letters; want only its own emit", id, n, len(r.Writes), len(r.DeadLetters))
		}
	}
	for what, err := range l.errs {
		if !errors.Is(err, flowlet.ErrStepEnded) {
			t.Errorf("%s of a kept Context in the next step: %v, want ErrStepEnded", what, err)
		}
	}
	if len(l.errs) == 0 {
		t.Fatal("the kept Context was not used")
	}
	if !l.done {
		t.Error("a kept Context is not done in the next step")
	}
}

// carelessWriter makes a state call with a key over MaxKeySize and ignores
// the error, as a careless flowlet would.
type carelessWriter struct{ op string }

func (c carelessWriter) ProcessBatch(ctx flowlet.Context, _ []flowlet.Event) error {
	huge := make([]byte, flowlet.MaxKeySize+1)
	switch c.op {
	case "Put":
		_ = ctx.State("t").Put(huge, []byte("v"))
	case "Delete":
		_ = ctx.State("t").Delete(huge)
	case "Add":
		_ = ctx.Counters("c").Add(huge, 1)
	case "Get":
		_, _, _ = ctx.State("t").Get(huge)
	}
	return ctx.Emit("out", []byte("x"))
}

// TestRefusedKeyFailsTheStep: the SDK refuses a key over MaxKeySize
// itself (the host never sees it), so it must fail the step as the host
// fails one whose state call failed: else the step commits without the
// write. The error wraps flowlet.ErrKeyTooLarge.
func TestRefusedKeyFailsTheStep(t *testing.T) {
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	for _, op := range []string{"Put", "Delete", "Add", "Get"} {
		s := newServer(nil, func() flowlet.Flowlet { return carelessWriter{op} }, flowlet.TypeInfo{}, devnull)
		if _, err := s.Init(context.Background(), &pb.InitRequest{Name: "careless", Instances: 1}); err != nil {
			t.Fatal(err)
		}
		s.host = fakeHost{}
		r, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Error == nil || len(r.Writes) != 0 || r.GetPackedEmits() != nil {
			t.Errorf("%s of a huge key ignored: error %v, %d writes, emits %v; want a failed step with nothing", op, r.GetError(), len(r.Writes), r.GetPackedEmits())
		}
	}
	if err := (&stepCtx{}).check(0, make([]byte, flowlet.MaxKeySize+1)); !errors.Is(err, flowlet.ErrKeyTooLarge) {
		t.Errorf("check: %v, want ErrKeyTooLarge", err)
	}
}

// stateCaller makes one state call on a table or counters of name (a
// table named "t" by default) and ignores its error, but keeps it in err.
type stateCaller struct {
	op, name string
	err      *error
}

func (c stateCaller) ProcessBatch(ctx flowlet.Context, _ []flowlet.Event) error {
	name := c.name
	if name == "" {
		name = "t"
	}
	var err error
	switch c.op {
	case "Put":
		err = ctx.State(name).Put([]byte("k"), []byte("v"))
	case "Delete":
		err = ctx.State(name).Delete([]byte("k"))
	case "Add":
		err = ctx.Counters(name).Add([]byte("k"), 1)
	case "Get":
		_, _, err = ctx.State(name).Get([]byte("k"))
	case "CounterGet":
		_, err = ctx.Counters(name).Get([]byte("k"))
	case "Scan":
		it := ctx.State(name).Scan(flowlet.ScanOptions{})
		for it.Next() {
		}
		err = it.Err()
	case "CounterScan":
		it := ctx.Counters(name).Scan(flowlet.ScanOptions{})
		for it.Next() {
		}
		err = it.Err()
	}
	*c.err = err
	return ctx.Emit("out", []byte("x"))
}

// TestStateCallRefusedInTheSDK: what the SDK refuses itself fails the
// call as the host's refusal would, with a typed error: a table or
// counters name that is not [a-z0-9][a-z0-9_-]{0,62} (the host would fail
// the step with it; the SDK's Put said nil), and a read without a host to
// ask (the step committed writes computed from a failed read).
func TestStateCallRefusedInTheSDK(t *testing.T) {
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	run := func(c stateCaller, host pb.HostClient) *pb.StepResponse {
		t.Helper()
		s := newServer(nil, func() flowlet.Flowlet { return c }, flowlet.TypeInfo{}, devnull)
		if _, err := s.Init(context.Background(), &pb.InitRequest{Name: "caller", Instances: 1}); err != nil {
			t.Fatal(err)
		}
		s.host = host
		r, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, op := range []string{"Put", "Delete", "Add", "Get", "CounterGet", "Scan", "CounterScan"} {
		var err error
		r := run(stateCaller{op: op, name: "Bad Name", err: &err}, fakeHost{})
		if !errors.Is(err, flowlet.ErrInvalidName) {
			t.Errorf("%s of a bad name: %v, want ErrInvalidName", op, err)
		}
		if r.Error == nil || len(r.Writes) != 0 || r.GetPackedEmits() != nil {
			t.Errorf("%s of a bad name ignored: error %v, %d writes, emits %v; want a failed step with nothing", op, r.GetError(), len(r.Writes), r.GetPackedEmits())
		}
	}
	for _, op := range []string{"Get", "CounterGet", "Scan"} {
		var err error
		r := run(stateCaller{op: op, err: &err}, nil)
		if !errors.Is(err, errNoHost) || r.Error == nil || r.GetPackedEmits() != nil {
			t.Errorf("%s without a host: %v, step error %v, emits %v; want errNoHost and a failed step", op, err, r.GetError(), r.GetPackedEmits())
		}
	}
}

// carelessSource makes a state call the SDK refuses, ignores its error,
// writes, and ends its step with end.
type carelessSource struct{ end error }

func (c carelessSource) Generate(ctx flowlet.Context) error {
	_ = ctx.State("t").Put(make([]byte, flowlet.MaxKeySize+1), nil)
	_ = ctx.State("t").Put([]byte("ok"), nil)
	return c.end
}

// TestRefusedCallFailsIdleStep: a Generate that returns ErrIdle or
// ErrEndOfInput commits its step, but not one whose state call failed, as
// in the runtime (its writes were sent: the refused Put was lost).
func TestRefusedCallFailsIdleStep(t *testing.T) {
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	for _, end := range []error{flowlet.ErrIdle, flowlet.ErrEndOfInput, nil} {
		s := newServer(nil, func() flowlet.Flowlet { return carelessSource{end} }, flowlet.TypeInfo{}, devnull)
		if _, err := s.Init(context.Background(), &pb.InitRequest{Name: "careless", Instances: 1}); err != nil {
			t.Fatal(err)
		}
		s.host = fakeHost{}
		r, err := s.Generate(context.Background(), &pb.StepRequest{CallId: 1})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetError().GetKind() != pb.Error_FAILED || len(r.Writes) != 0 {
			t.Errorf("Generate returning %v after a refused Put: error %v, %d writes; want a failed step with nothing", end, r.GetError(), len(r.Writes))
		}
	}
}
