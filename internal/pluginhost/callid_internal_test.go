package pluginhost

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet/plugin/channel"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// A step channel response that names another step is refused, never
// applied: frames out of step (a plugin and a host of different versions)
// fail the step instead of losing or misplacing its events.
func TestChannelResponseForAnotherStep(t *testing.T) {
	host, plug := openChannelPair(t, func(c net.Conn) net.Conn { return c })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	perr := make(chan error, 1)
	go func() { // the plugin answers the first step with another's id, then rightly
		var call pb.StepCall
		for _, id := range []uint64{4, 6} {
			if err := plug.Read(&call); err != nil {
				perr <- err
				return
			}
			if err := plug.Write(&pb.StepResponse{CallId: id, Emits: []*pb.Emit{{Payload: []byte("x")}}}); err != nil {
				perr <- err
				return
			}
		}
		perr <- nil
	}()
	in := &inst{p: &Plugin{opts: Options{CallTimeout: 10 * time.Second}}, callID: 5}
	pr := &proc{ch: host}
	call := &pb.StepCall{Op: pb.StepCall_TICK, Step: &pb.StepRequest{CallId: 5}}
	resp, _, err := in.channelStep(ctx, pr, call)
	if err == nil || !strings.Contains(err.Error(), "out of step") {
		t.Fatalf("a response for step 4 to step 5 = %v, %v; want an out-of-step error", resp, err)
	}
	in.callID = 6
	call.Step.CallId = 6
	resp, _, err = in.channelStep(ctx, pr, call)
	if err != nil || len(resp.GetEmits()) != 1 {
		t.Fatalf("the matching response: %v, %v", resp, err)
	}
	if err := <-perr; err != nil {
		t.Fatal(err)
	}
}

// openChannelPair connects a host and a plugin end of a step channel over a
// Unix socket, with fresh pinned certificates, and opens it (handshake and
// acknowledgement). wrap may wrap the host's connection.
func openChannelPair(t *testing.T, wrap func(net.Conn) net.Conn) (host, plug *channel.Conn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	t.Cleanup(func() { a.Close(); b.Close() })
	hc, _ := channel.NewCert()
	pc, _ := channel.NewCert()
	host = channel.Client(wrap(a), channel.Config(hc, pc.Certificate[0]))
	plug = channel.Server(b, channel.Config(pc, hc.Certificate[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	aerr := make(chan error, 1)
	go func() { aerr <- plug.Accept(ctx) }()
	if err := host.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-aerr; err != nil {
		t.Fatal(err)
	}
	return host, plug
}
