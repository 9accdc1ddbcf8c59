package pluginhost

import (
	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// ProcessExited reports whether the host has seen the running process of
// f (a flowlet of Plugin.New) exit, so that a test can kill one between
// calls and know the next call starts another.
func ProcessExited(f flowlet.Flowlet) bool {
	return f.(interface{ exitedForTest() bool }).exitedForTest()
}

func (in *inst) exitedForTest() bool {
	in.pmu.Lock()
	pr := in.pr
	in.pmu.Unlock()
	return pr != nil && pr.exited()
}

// SendUnsendable runs a step of f whose request cannot be marshalled (a
// key value that is not UTF-8, which the host's checks keep out of a real
// batch), so that a test can see how a call that failed to send is told.
func SendUnsendable(f flowlet.Flowlet, ctx flowlet.Context) error {
	return f.(interface {
		sendUnsendableForTest(flowlet.Context) error
	}).sendUnsendableForTest(ctx)
}

func (in *inst) sendUnsendableForTest(ctx flowlet.Context) error {
	return in.call(ctx, pb.StepCall_PROCESS_BATCH, nil, func(step *pb.StepRequest) *pb.StepCall {
		ev := &pb.Event{Id: "x", Keys: []*pb.KeyValue{{Name: "k", Value: "\xff"}}}
		return &pb.StepCall{Op: pb.StepCall_PROCESS_BATCH, Batch: &pb.BatchRequest{Step: step, Events: []*pb.Event{ev}}}
	})
}
