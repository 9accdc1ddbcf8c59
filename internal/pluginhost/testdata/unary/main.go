// Command unary is a plugin written against the contract without the SDK,
// as a plugin in another language would be: it implements only the unary
// calls (no Steps stream) and answers with plain (unpacked) emits. Each
// input event's payload comes back upper-cased on "out".
//
// UNARY_CHANNEL in its environment makes it implement OpenChannel, badly:
// "refuse" opens a step channel that refuses the host's certificate (it
// expects another one), "hang" never answers OpenChannel, "slow" takes
// all but a second of Init's deadline and then two seconds to answer
// OpenChannel (UNIMPLEMENTED). UNARY_OUTPUT names the output it declares
// instead of "out".
package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowrun/flowrun/flowlet/plugin"
	"github.com/flowrun/flowrun/flowlet/plugin/channel"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

type server struct {
	pb.UnimplementedFlowletServer
}

func (server) Describe(context.Context, *pb.DescribeRequest) (*pb.TypeInfo, error) {
	out := "out"
	if o, ok := os.LookupEnv("UNARY_OUTPUT"); ok {
		out = o
	}
	return &pb.TypeInfo{Outputs: []string{out}, Process: true, Doc: "unary test plugin"}, nil
}

func (server) Init(ctx context.Context, _ *pb.InitRequest) (*pb.InitResponse, error) {
	if d, ok := ctx.Deadline(); ok && os.Getenv("UNARY_CHANNEL") == "slow" {
		time.Sleep(time.Until(d) - time.Second)
	}
	return &pb.InitResponse{}, nil
}

func (server) Close(context.Context, *pb.CloseRequest) (*pb.CloseResponse, error) {
	return &pb.CloseResponse{}, nil
}

func (server) ProcessBatch(_ context.Context, r *pb.BatchRequest) (*pb.StepResponse, error) {
	var out pb.StepResponse
	for _, e := range r.Events {
		out.Emits = append(out.Emits, &pb.Emit{Output: "out", Payload: bytes.ToUpper(e.Payload), Keys: []*pb.KeyValue{{Name: "id", Value: e.Id}}})
	}
	if p := r.Packed; p != nil {
		var start, idStart uint32
		for i, end := range p.PayloadEnds {
			id := string(p.Ids[idStart:p.IdEnds[i]])
			out.Emits = append(out.Emits, &pb.Emit{Output: "out", Payload: bytes.ToUpper(p.Payloads[start:end]), Keys: []*pb.KeyValue{{Name: "id", Value: id}}})
			start, idStart = end, p.IdEnds[i]
		}
	}
	return &out, nil
}

func (server) OpenChannel(ctx context.Context, r *pb.ChannelRequest) (*pb.ChannelResponse, error) {
	switch os.Getenv("UNARY_CHANNEL") {
	case "hang":
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	case "slow":
		time.Sleep(2 * time.Second)
	case "refuse":
		cert, err := channel.NewCert()
		if err != nil {
			return nil, err
		}
		other, err := channel.NewCert() // expected instead of the host's
		if err != nil {
			return nil, err
		}
		addr := filepath.Join(os.Getenv("PLUGIN_UNIX_SOCKET_DIR"), fmt.Sprintf("refuse-%d.sock", os.Getpid()))
		l, err := net.Listen("unix", addr)
		if err != nil {
			return nil, err
		}
		go func() {
			defer l.Close()
			raw, err := l.Accept()
			if err != nil {
				return
			}
			defer raw.Close()
			hctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = channel.Server(raw, channel.Config(cert, other.Certificate[0])).Accept(hctx)
			fmt.Fprintln(os.Stderr, "unary: step channel:", err)
		}()
		return &pb.ChannelResponse{Network: "unix", Address: addr, PluginCert: cert.Certificate[0]}, nil
	}
	return nil, status.Error(codes.Unimplemented, "no step channel")
}

type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterFlowletServer(s, server{})
	return nil
}

func (grpcPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}

func main() {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: plugin.Handshake,
		Plugins:         goplugin.PluginSet{plugin.Name: grpcPlugin{}},
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
}
