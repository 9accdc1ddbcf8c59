// Command unary is a plugin written against the contract without the SDK,
// as a plugin in another language would be: it implements only the unary
// calls (no Steps stream) and answers with plain (unpacked) emits. Each
// input event's payload comes back upper-cased on "out".
package main

import (
	"bytes"
	"context"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/flowrun/flowrun/flowlet/plugin"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

type server struct {
	pb.UnimplementedFlowletServer
}

func (server) Describe(context.Context, *pb.DescribeRequest) (*pb.TypeInfo, error) {
	return &pb.TypeInfo{Outputs: []string{"out"}, Process: true, Doc: "unary test plugin"}, nil
}

func (server) Init(context.Context, *pb.InitRequest) (*pb.InitResponse, error) {
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
