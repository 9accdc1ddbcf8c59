package plugin

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/plugin/channel"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// server implements the Flowlet service for one flowlet instance.
type server struct {
	pb.UnimplementedFlowletServer
	broker     *goplugin.GRPCBroker
	newFlowlet func() flowlet.Flowlet
	info       flowlet.TypeInfo
	stderr     *os.File

	mu     sync.Mutex // one call at a time
	f      flowlet.Flowlet
	conn   *grpc.ClientConn
	host   pb.HostClient
	name   string
	inst   int
	insts  int
	logger *slog.Logger
	sc     stepCtx
	evs    []flowlet.Event

	chanOpen bool // OpenChannel was called
}

func newServer(broker *goplugin.GRPCBroker, nf func() flowlet.Flowlet, info flowlet.TypeInfo, stderr *os.File) *server {
	s := &server{broker: broker, newFlowlet: nf, info: info, stderr: stderr}
	s.sc.s = s
	return s
}

func (s *server) Describe(context.Context, *pb.DescribeRequest) (*pb.TypeInfo, error) {
	return Describe(s.newFlowlet(), s.info), nil
}

// CheckConfig runs the type's flowlet.ConfigChecker, when it has one, on a
// fresh value with the request's name, instances and config (instance 0,
// no Host service); the process's own flowlet is left alone. A type
// without one has nothing to check: the answer is "ok".
func (s *server) CheckConfig(ctx context.Context, req *pb.InitRequest) (*pb.CheckConfigResponse, error) {
	cc, ok := s.newFlowlet().(flowlet.ConfigChecker)
	if !ok {
		return &pb.CheckConfigResponse{}, nil
	}
	cfg, err := DecodeConfig(req.ConfigJson)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "flowrun plugin: config: %v", err)
	}
	ic := flowlet.InitContext{Name: req.Name, Instance: int(req.Instance), Instances: max(int(req.Instances), 1),
		Config: flowlet.NewConfig(req.Name, cfg), Logger: slog.New(slog.NewJSONHandler(s.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	err = safeCall(func() error { return cc.CheckConfig(ic) })
	if err == nil {
		return &pb.CheckConfigResponse{}, nil
	}
	var pe *panicError
	if errors.As(err, &pe) {
		fmt.Fprintf(s.stderr, "flowrun plugin: CheckConfig panicked: %v\n%s", pe.value, pe.stack)
		return nil, status.Errorf(codes.Internal, "CheckConfig panicked: %v", pe.value)
	}
	return configResponse(req.Name, err), nil
}

// configResponse is the wire form of a config error of the flowlet
// named name: its field (the ConfigField() of a *flowlet.ConfigError, or of
// any error in the chain with that method) and its message without the
// flowlet's name and the field, which the host adds back.
func configResponse(name string, err error) *pb.CheckConfigResponse {
	var fe interface{ ConfigField() string }
	field := ""
	if errors.As(err, &fe) {
		field = fe.ConfigField()
	}
	msg := err.Error()
	if field != "" {
		msg = strings.ReplaceAll(msg, fmt.Sprintf("flowlet %q: config field %q: ", name, field), "")
	}
	msg = strings.ReplaceAll(msg, fmt.Sprintf("flowlet %q: config: ", name), "")
	msg = strings.TrimPrefix(msg, fmt.Sprintf("flowlet %q: ", name))
	if msg == "" {
		msg = "invalid"
	}
	return &pb.CheckConfigResponse{Error: validText(msg), Field: validText(field)}
}

func (s *server) Init(ctx context.Context, req *pb.InitRequest) (*pb.InitResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		return nil, status.Error(codes.FailedPrecondition, "flowrun plugin: Init called twice")
	}
	cfg, err := DecodeConfig(req.ConfigJson)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "flowrun plugin: config: %v", err)
	}
	if req.HostBrokerId != 0 {
		conn, err := s.broker.Dial(req.HostBrokerId)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "flowrun plugin: dial the host: %v", err)
		}
		s.conn, s.host = conn, pb.NewHostClient(conn)
	}
	s.name, s.inst, s.insts = req.Name, int(req.Instance), int(req.Instances)
	s.logger = slog.New(slog.NewJSONHandler(s.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f := s.newFlowlet()
	info := Describe(f, s.info)
	if in, ok := f.(flowlet.Initializer); ok {
		ic := flowlet.InitContext{Name: s.name, Instance: s.inst, Instances: s.insts,
			Config: flowlet.NewConfig(s.name, cfg), Logger: s.logger}
		if err := safeCall(func() error { return in.Init(ic) }); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
	}
	s.f = f
	return &pb.InitResponse{Info: info}, nil
}

func (s *server) ProcessBatch(ctx context.Context, req *pb.BatchRequest) (*pb.StepResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil, status.Error(codes.FailedPrecondition, "flowrun plugin: ProcessBatch before Init")
	}
	s.evs = s.evs[:0]
	if err := s.unpack(req.Packed); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	for _, e := range req.Events {
		ev := flowlet.Event{ID: e.Id, Input: e.Input, Payload: e.Payload, TraceID: e.TraceId}
		if e.EventTime != 0 {
			ev.EventTime = time.Unix(0, e.EventTime)
		}
		if len(e.Keys) > 0 {
			ev.Keys = make([]flowlet.KeyValue, len(e.Keys))
			for i, kv := range e.Keys {
				ev.Keys[i] = flowlet.KeyValue{Name: kv.Name, Value: kv.Value}
			}
		}
		s.evs = append(s.evs, ev)
	}
	c := s.begin(ctx, req.Step)
	var err error
	switch f := s.f.(type) {
	case flowlet.BatchProcessor:
		err = safeCall(func() error { return f.ProcessBatch(c, s.evs) })
	case flowlet.Processor:
		for i := range s.evs {
			if err = safeCall(func() error { return f.Process(c, s.evs[i]) }); err != nil {
				err = &indexed{err, i}
				break
			}
		}
	default:
		return nil, status.Error(codes.Unimplemented, "flowrun plugin: the flowlet implements neither Process nor ProcessBatch")
	}
	r := s.sc.response(err) // first: it ends the Context (DeadLetterEvent reads s.evs)
	clear(s.evs)            // drop references to the request
	s.evs = s.evs[:0]
	return r, nil
}

// unpack appends the events of a packed batch to s.evs. Payloads are
// sub-slices of the request's buffer, ids and inputs substrings of one
// string per batch.
func (s *server) unpack(p *pb.PackedEvents) error {
	n := len(p.GetPayloadEnds())
	if n == 0 {
		return nil
	}
	if len(p.IdEnds) != n || (len(p.InputIndex) != 0 && len(p.InputIndex) != n) || (len(p.EventTimes) != 0 && len(p.EventTimes) != n) ||
		(len(p.TraceIds) != 0 && len(p.TraceIds) != n) || len(p.Inputs) == 0 {
		return errors.New("flowrun plugin: malformed packed batch (column lengths differ)")
	}
	ids := string(p.Ids)
	var pe, ie uint32
	for i := range n {
		pEnd, iEnd := p.PayloadEnds[i], p.IdEnds[i]
		if pEnd < pe || int(pEnd) > len(p.Payloads) || iEnd < ie || int(iEnd) > len(ids) {
			return errors.New("flowrun plugin: malformed packed batch (offsets)")
		}
		ev := flowlet.Event{ID: ids[ie:iEnd], Payload: p.Payloads[pe:pEnd:pEnd], Input: p.Inputs[0]}
		pe, ie = pEnd, iEnd
		if len(p.InputIndex) > 0 {
			k := p.InputIndex[i]
			if int(k) >= len(p.Inputs) {
				return errors.New("flowrun plugin: malformed packed batch (input index)")
			}
			ev.Input = p.Inputs[k]
		}
		if len(p.EventTimes) > 0 && p.EventTimes[i] != 0 {
			ev.EventTime = time.Unix(0, p.EventTimes[i])
		}
		if len(p.TraceIds) > 0 {
			ev.TraceID = p.TraceIds[i]
		}
		s.evs = append(s.evs, ev)
	}
	for _, k := range p.Keys {
		if int(k.Event) >= n {
			return errors.New("flowrun plugin: malformed packed batch (keys of a missing event)")
		}
		kvs := make([]flowlet.KeyValue, len(k.Keys))
		for j, kv := range k.Keys {
			kvs[j] = flowlet.KeyValue{Name: kv.Name, Value: kv.Value}
		}
		s.evs[k.Event].Keys = kvs
	}
	return nil
}

func (s *server) Generate(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.f.(flowlet.Source)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "flowrun plugin: the flowlet does not implement Generate (or Init was not called)")
	}
	c := s.begin(ctx, req)
	return s.sc.response(safeCall(func() error { return g.Generate(c) })), nil
}

func (s *server) Tick(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.f.(flowlet.Ticker)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "flowrun plugin: the flowlet does not implement Tick (or Init was not called)")
	}
	c := s.begin(ctx, req)
	return s.sc.response(safeCall(func() error { return t.Tick(c) })), nil
}

func (s *server) Close(context.Context, *pb.CloseRequest) (*pb.CloseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var resp pb.CloseResponse
	if c, ok := s.f.(flowlet.Closer); ok {
		if err := safeCall(c.Close); err != nil {
			resp.Error = validText(err.Error())
		}
	}
	s.f = nil
	stopProfile()
	if s.conn != nil {
		s.conn.Close()
		s.conn, s.host = nil, nil
	}
	return &resp, nil
}

// Steps serves the steps of the process over one stream: each StepCall is
// run like the unary call of its op, and its StepResponse sent back.
func (s *server) Steps(stream pb.Flowlet_StepsServer) error {
	ctx := stream.Context()
	for {
		call, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		resp, err := s.step(ctx, call)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// step runs one StepCall of Steps or of the step channel.
func (s *server) step(ctx context.Context, call *pb.StepCall) (*pb.StepResponse, error) {
	switch call.Op {
	case pb.StepCall_PROCESS_BATCH:
		if call.Batch == nil {
			return nil, status.Error(codes.InvalidArgument, "flowrun plugin: PROCESS_BATCH without a batch")
		}
		return s.ProcessBatch(ctx, call.Batch)
	case pb.StepCall_GENERATE:
		return s.Generate(ctx, call.Step)
	case pb.StepCall_TICK:
		return s.Tick(ctx, call.Step)
	}
	return nil, status.Errorf(codes.InvalidArgument, "flowrun plugin: unknown step op %v", call.Op)
}

// stepCallID is the call_id of a step call's request.
func stepCallID(call *pb.StepCall) uint64 {
	if call.Op == pb.StepCall_PROCESS_BATCH {
		return call.GetBatch().GetStep().GetCallId()
	}
	return call.GetStep().GetCallId()
}

// ChannelEnv names an environment variable for diagnostics and
// comparisons: "off" makes the plugin answer OpenChannel with
// codes.Unimplemented, so the host sends its steps over the Steps stream.
const ChannelEnv = "FLOWRUN_PLUGIN_CHANNEL"

// channelAcceptTimeout bounds the wait for the host to connect to the step
// channel (and its TLS handshake).
const channelAcceptTimeout = 30 * time.Second

// OpenChannel listens on a new socket for the step channel (package
// channel) and returns its address and the plugin's certificate for it.
func (s *server) OpenChannel(ctx context.Context, req *pb.ChannelRequest) (*pb.ChannelResponse, error) {
	if os.Getenv(ChannelEnv) == "off" {
		return nil, status.Error(codes.Unimplemented, "flowrun plugin: the step channel is off ("+ChannelEnv+")")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil, status.Error(codes.FailedPrecondition, "flowrun plugin: OpenChannel before Init")
	}
	if s.chanOpen {
		return nil, status.Error(codes.FailedPrecondition, "flowrun plugin: OpenChannel called twice")
	}
	if len(req.HostCert) == 0 {
		return nil, status.Error(codes.InvalidArgument, "flowrun plugin: OpenChannel without the host's certificate")
	}
	cert, err := channel.NewCert()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "flowrun plugin: step channel certificate: %v", err)
	}
	dir := os.Getenv("PLUGIN_UNIX_SOCKET_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	var rnd [8]byte
	_, _ = crand.Read(rnd[:])
	addr := filepath.Join(dir, fmt.Sprintf("steps-%d-%x.sock", os.Getpid(), rnd))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "flowrun plugin: step channel: %v", err)
	}
	s.chanOpen = true
	go s.serveChannel(l, channel.Config(cert, req.HostCert))
	return &pb.ChannelResponse{Network: "unix", Address: addr, PluginCert: cert.Certificate[0]}, nil
}

// serveChannel accepts the host's connection (the first one that presents
// the host's certificate), acknowledges it (the host waits for that before
// its first step), then serves steps on it until it closes.
func (s *server) serveChannel(l *net.UnixListener, cfg *tls.Config) {
	deadline := time.Now().Add(channelAcceptTimeout)
	_ = l.SetDeadline(deadline)
	var c *channel.Conn
	for c == nil {
		raw, err := l.Accept()
		if err != nil {
			l.Close()
			fmt.Fprintln(s.stderr, "flowrun plugin: step channel: the host did not connect:", err)
			return
		}
		cc := channel.Server(raw, cfg)
		hctx, cancel := context.WithDeadline(context.Background(), deadline)
		if err := cc.Accept(hctx); err != nil { // handshake and acknowledgement
			raw.Close()
			fmt.Fprintln(s.stderr, "flowrun plugin: step channel: refused a connection:", err)
		} else {
			c = cc
		}
		cancel()
	}
	l.Close() // removes the socket file: nobody else connects
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every call is decoded into call, whose batch columns keep their
	// capacity from step to step; its payloads are slices of the frame,
	// valid until the next call (an event's payload is valid only during
	// the step).
	var call pb.StepCall
	var dec pb.CallDecoder
	for {
		b, err := c.ReadFrame()
		if err == nil {
			if err = dec.Decode(b, &call); err != nil {
				err = fmt.Errorf("flowrun step channel: unmarshal: %w", err)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				fmt.Fprintln(s.stderr, "flowrun plugin: step channel:", err)
			}
			return
		}
		resp, err := s.step(ctx, &call)
		if err == nil {
			resp.CallId = stepCallID(&call)
		}
		if err != nil {
			// The host sent a step it must not (Steps would end the stream
			// with this status): end the channel; the host's step fails.
			fmt.Fprintln(s.stderr, "flowrun plugin: step channel:", status.Convert(err).Message())
			return
		}
		if err := c.Write(resp); err != nil {
			// Say why (a response over channel.MaxFrame, say): the host
			// sees the channel end and puts stderr's tail in its error.
			fmt.Fprintln(s.stderr, "flowrun plugin: step channel: cannot send the step's response:", err)
			return
		}
	}
}

// begin resets the step context for a call and makes the call's Context
// (a new one, so that one kept from an earlier call is ended); it has
// DeadLetter only when the host's has.
func (s *server) begin(ctx context.Context, req *pb.StepRequest) flowlet.Context {
	s.sc.reset(ctx, req.GetCallId())
	k := callCtx{c: &s.sc, seq: s.sc.seq}
	switch {
	case req.GetDeadLetter() && req.GetDeadLetterEvent():
		return &dleCallCtx{dlCallCtx{k}}
	case req.GetDeadLetter():
		return &dlCallCtx{k}
	}
	return &k
}

// indexed is an error of the event at index i of a batch run with Process.
type indexed struct {
	err error
	i   int
}

func (e *indexed) Error() string { return e.err.Error() }
func (e *indexed) Unwrap() error { return e.err }

// panicError is a recovered panic.
type panicError struct {
	value any
	stack string
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

func safeCall(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &panicError{value: r, stack: string(debug.Stack())}
		}
	}()
	return fn()
}

// wireError converts a flowlet's error to its wire form.
func wireError(err error) *pb.Error {
	if err == nil {
		return nil
	}
	// Message and Stack are protobuf strings: UTF-8, or the response
	// cannot be sent (an error made from a payload, a panic's value).
	e := &pb.Error{Kind: pb.Error_FAILED, Message: validText(err.Error())}
	var pe *panicError
	switch {
	case errors.Is(err, flowlet.ErrIdle):
		e.Kind = pb.Error_IDLE
	case errors.Is(err, flowlet.ErrEndOfInput):
		e.Kind = pb.Error_END_OF_INPUT
	case errors.As(err, &pe):
		e.Kind, e.Stack = pb.Error_PANIC, validText(pe.stack)
	}
	var perm interface{ Permanent() bool }
	if errors.As(err, &perm) {
		e.Permanent = perm.Permanent()
	}
	var ix *indexed
	if errors.As(err, &ix) {
		e.Events = []int32{int32(ix.i)}
	}
	var evs interface{ EventIndexes() []int }
	if errors.As(err, &evs) {
		for _, i := range evs.EventIndexes() {
			e.Events = append(e.Events, int32(i))
		}
	}
	return e
}

// DecodeConfig decodes a flowlet config sent as a JSON object into the Go
// values package flowlet's Config expects: whole numbers become int (or
// float64 beyond int's range, when a float64 holds them exactly: else, as
// for a number beyond float64, an error, as the planner makes it), other
// numbers float64.
func DecodeConfig(js string) (map[string]any, error) {
	if strings.TrimSpace(js) == "" {
		return map[string]any{}, nil
	}
	d := json.NewDecoder(bytes.NewReader([]byte(js)))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	v, err := fixNumbers(m)
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

func fixNumbers(v any) (any, error) {
	var err error
	switch v := v.(type) {
	case json.Number:
		whole := !strings.ContainsAny(string(v), ".eE")
		if i, err := v.Int64(); err == nil && whole {
			return int(i), nil
		}
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s is beyond float64", v)
		}
		// A whole number beyond int64 is a float64 the planner took: the
		// host's encoding/json writes it in its shortest form (2^63 as
		// 9223372036854776000), which is not its exact value; an integer
		// that is neither would be rounded.
		if i, ok := new(big.Int).SetString(string(v), 10); ok && whole && new(big.Float).SetInt(i).Cmp(big.NewFloat(f)) != 0 &&
			strconv.FormatFloat(f, 'f', -1, 64) != string(v) {
			return nil, fmt.Errorf("integer %s is beyond int64 and a float64 cannot hold it exactly", v)
		}
		return f, nil
	case map[string]any:
		for k, e := range v {
			if v[k], err = fixNumbers(e); err != nil {
				return nil, err
			}
		}
	case []any:
		for i, e := range v {
			if v[i], err = fixNumbers(e); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}
