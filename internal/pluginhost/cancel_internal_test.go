package pluginhost

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// gateConn holds a past deadline (the one a cancelled step context sets)
// until a later deadline is set or a moment has passed, and says when it
// has entered and when it has landed: the cancellation's callback running
// late, as it may on a busy machine.
type gateConn struct {
	net.Conn
	entered, landed chan struct{}
	mu              sync.Mutex
	waiting         bool
	release         chan struct{}
	once            sync.Once
}

func (g *gateConn) SetDeadline(t time.Time) error {
	if !t.IsZero() && t.Before(time.Now()) {
		g.mu.Lock()
		g.waiting = true
		g.mu.Unlock()
		close(g.entered)
		select {
		case <-g.release:
		case <-time.After(100 * time.Millisecond):
		}
		err := g.Conn.SetDeadline(t)
		close(g.landed)
		return err
	}
	err := g.Conn.SetDeadline(t)
	g.mu.Lock()
	if g.waiting {
		g.once.Do(func() { close(g.release) })
	}
	g.mu.Unlock()
	return err
}

// TestChannelCancelRace: a step context cancelled as the step ends, its
// callback (a past deadline on the connection) running late. The step
// waits for it, so it cannot land after the next step has set its
// deadline and make that step fail as a timeout.
func TestChannelCancelRace(t *testing.T) {
	g := &gateConn{entered: make(chan struct{}), landed: make(chan struct{}), release: make(chan struct{})}
	host, plug := openChannelPair(t, func(c net.Conn) net.Conn { g.Conn = c; return g })

	ctx, cancel := context.WithCancel(context.Background())
	perr := make(chan error, 1)
	go func() { // the plugin
		var call pb.StepCall
		if err := plug.Read(&call); err != nil {
			perr <- err
			return
		}
		cancel()    // as the step ends
		<-g.entered // the callback has started, its deadline not set yet
		if err := plug.Write(&pb.StepResponse{}); err != nil {
			perr <- err
			return
		}
		if err := plug.Read(&call); err != nil {
			perr <- err
			return
		}
		select { // answer once a late deadline would have landed
		case <-g.landed:
		case <-time.After(time.Second):
		}
		perr <- plug.Write(&pb.StepResponse{})
	}()
	in := &inst{p: &Plugin{opts: Options{CallTimeout: 20 * time.Second}}}
	pr := &proc{ch: host}
	call := &pb.StepCall{Op: pb.StepCall_TICK, Step: &pb.StepRequest{}}
	if _, _, err := in.channelStep(ctx, pr, call); err != nil {
		t.Logf("the cancelled step: %v", err) // either outcome is right
	}
	if _, timedOut, err := in.channelStep(context.Background(), pr, call); err != nil {
		t.Fatalf("the next step failed (timeout %v): %v", timedOut, err)
	}
	if err := <-perr; err != nil {
		t.Fatal(err)
	}
}

// fakeFlowlet serves Steps streams whose Recv runs onRecv first.
type fakeFlowlet struct {
	pb.FlowletClient
	onRecv func(stream context.Context)
	opened int
}

func (f *fakeFlowlet) Steps(ctx context.Context, _ ...grpc.CallOption) (pb.Flowlet_StepsClient, error) {
	f.opened++
	return &fakeSteps{ctx: ctx, f: f}, nil
}

type fakeSteps struct {
	grpc.ClientStream
	ctx context.Context
	f   *fakeFlowlet
}

func (s *fakeSteps) Send(*pb.StepCall) error { return nil }

func (s *fakeSteps) Recv() (*pb.StepResponse, error) {
	if on := s.f.onRecv; on != nil {
		s.f.onRecv = nil
		on(s.ctx)
	}
	return &pb.StepResponse{}, nil
}

// TestStreamCancelRace: the same on the Steps stream: a step context
// cancelled as the step ends ends that stream only; the next step opens a
// new one instead of failing on a closed one.
func TestStreamCancelRace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeFlowlet{}
	f.onRecv = func(stream context.Context) {
		cancel()        // as the step ends
		<-stream.Done() // the callback ended the stream
	}
	in := &inst{p: &Plugin{opts: Options{CallTimeout: 20 * time.Second}}}
	pr := &proc{client: f}
	call := &pb.StepCall{Op: pb.StepCall_TICK, Step: &pb.StepRequest{}}
	if _, _, err := in.stream(ctx, pr, call); err != nil {
		t.Logf("the cancelled step: %v", err)
	}
	if _, _, err := in.stream(context.Background(), pr, call); err != nil {
		t.Fatalf("the next step failed: %v", err)
	}
	if f.opened != 2 {
		t.Errorf("%d streams opened, want 2", f.opened)
	}
}
