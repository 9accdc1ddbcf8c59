package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// fanOut uses its Context from goroutines of the step, and waits for them.
type fanOut struct{}

const fanGoroutines, fanCalls = 8, 200

func (fanOut) ProcessBatch(ctx flowlet.Context, _ []flowlet.Event) error {
	var wg sync.WaitGroup
	errs := make(chan error, fanGoroutines)
	for g := range fanGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range fanCalls {
				key := []byte(fmt.Sprint(g, "/", i))
				_, _, getErr := ctx.State("t").Get(key)
				if err := errors.Join(ctx.Emit("out", key, flowlet.Key("k", string(key))), ctx.State("t").Put(key, key),
					ctx.Counters("n").Add(key, 1), getErr); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// writeCounter is fakeHost counting the writes sent with reads.
type writeCounter struct {
	fakeHost
	writes atomic.Int64
}

func (w *writeCounter) Get(ctx context.Context, req *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error) {
	w.writes.Add(int64(len(req.Writes)))
	return w.fakeHost.Get(ctx, req, opts...)
}

// TestConcurrentUseDuringStep: goroutines of a step may use its Context,
// as in the runtime (which serializes their calls): the SDK's buffers were
// unguarded, so emits and writes were lost or their columns torn (a data
// race).
func TestConcurrentUseDuringStep(t *testing.T) {
	s := initedServer(t, "fan", fanOut{})
	host := &writeCounter{}
	s.host = host
	for id := uint64(1); id <= 3; id++ {
		r, err := s.ProcessBatch(context.Background(), &pb.BatchRequest{Step: &pb.StepRequest{CallId: id}})
		if err != nil || r.Error != nil {
			t.Fatalf("step %d: %v %v", id, err, r.GetError())
		}
		p := r.GetPackedEmits()
		const n = fanGoroutines * fanCalls
		if len(p.GetOutputIndex()) != n || len(p.GetPayloadEnds()) != n || len(p.GetKeyCounts()) != n || len(p.GetKeyValueEnds()) != n {
			t.Errorf("step %d: %d emits, %d payloads, %d key counts, %d keys; want %d each",
				id, len(p.GetOutputIndex()), len(p.GetPayloadEnds()), len(p.GetKeyCounts()), len(p.GetKeyValueEnds()), n)
		}
		if got := int(host.writes.Swap(0)) + len(r.Writes); got != 2*n {
			t.Errorf("step %d: %d writes, want %d", id, got, 2*n)
		}
	}
}
