package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/plugin"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// inst is one flowlet instance backed by one plugin process. The flowlet
// values New returns wrap it, with the method set the plugin implements.
type inst struct {
	p *Plugin

	mu         sync.Mutex // one call at a time
	name       string
	idx        int
	instances  int
	configJSON string
	inited     bool
	closed     bool
	fails      int // calls failed in a row (process restarts pending)
	lastFail   time.Time
	callID     uint64

	pmu sync.Mutex // guards pr, so kill does not wait for a hung call
	pr  *proc

	cb struct {
		mu  sync.Mutex
		ctx flowlet.Context
		id  uint64
		err error // first failed write applied in a callback
	}

	packed   pb.PackedEvents // reused batch buffers
	batchReq pb.BatchRequest
	stepCall pb.StepCall
	keys     []*pb.EventKeys
	opts     []flowlet.EmitOption
}

type (
	batchF     struct{ *inst }
	batchTickF struct{ *inst }
	srcF       struct{ *inst }
	srcTickF   struct{ *inst }
	tickF      struct{ *inst }
)

var (
	_ flowlet.BatchProcessor = batchF{}
	_ flowlet.Initializer    = batchF{}
	_ flowlet.Closer         = batchF{}
	_ flowlet.Ticker         = batchTickF{}
	_ flowlet.Source         = srcF{}
	_ flowlet.Ticker         = srcTickF{}
	_ flowlet.Ticker         = tickF{}
)

func (f batchF) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	return f.processBatch(ctx, evs)
}
func (f batchTickF) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	return f.processBatch(ctx, evs)
}
func (f batchTickF) Tick(ctx flowlet.Context) error { return f.tick(ctx) }
func (f srcF) Generate(ctx flowlet.Context) error   { return f.generate(ctx) }
func (f srcTickF) Generate(ctx flowlet.Context) error {
	return f.generate(ctx)
}
func (f srcTickF) Tick(ctx flowlet.Context) error { return f.tick(ctx) }
func (f tickF) Tick(ctx flowlet.Context) error    { return f.tick(ctx) }

// Init implements flowlet.Initializer: it starts the process and runs the
// plugin's Init with ic's config. The config is kept for restarts.
func (in *inst) Init(ic flowlet.InitContext) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	js, err := configJSON(ic.Name, ic.Config.Map())
	if err != nil {
		return err
	}
	in.name, in.idx, in.instances, in.configJSON, in.inited = ic.Name, ic.Instance, max(ic.Instances, 1), js, true
	ctx, cancel := context.WithTimeout(context.Background(), in.p.opts.CallTimeout+in.p.opts.StartTimeout)
	defer cancel()
	_, err = in.ensure(ctx)
	return err
}

// Close implements flowlet.Closer: the plugin's Close, then the process
// exits.
func (in *inst) Close() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.closed = true
	defer in.p.forget(in)
	pr := in.setProc(nil)
	if pr == nil {
		return nil
	}
	if pr.exited() {
		pr.kill()
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), in.p.opts.CallTimeout)
	defer cancel()
	r, err := pr.client.Close(ctx, &pb.CloseRequest{})
	if err != nil {
		pr.kill()
		return &CallError{Flowlet: in.name, Instance: in.idx, Op: "Close", Err: err, Timeout: ctx.Err() != nil}
	}
	pr.stop()
	if r.Error != "" {
		return fmt.Errorf("flowlet %q instance %d: plugin close: %s", in.name, in.idx, r.Error)
	}
	return nil
}

// PID is the process id of the instance's plugin process, 0 when none is
// running (for tests and diagnostics).
func (in *inst) PID() int {
	in.pmu.Lock()
	defer in.pmu.Unlock()
	if in.pr == nil {
		return 0
	}
	return in.pr.pid
}

// Transport says how the steps of the instance's running process travel:
// "channel" (the step channel), "steps" (the Steps stream), "unary" (one
// call per step), or "" when no process is running or it has not made a
// step yet and has no channel (for tests and diagnostics).
func (in *inst) Transport() string {
	in.pmu.Lock()
	pr := in.pr
	in.pmu.Unlock()
	if pr == nil {
		return ""
	}
	pr.smu.Lock()
	defer pr.smu.Unlock()
	switch {
	case pr.ch != nil:
		return "channel"
	case pr.noSteps:
		return "unary"
	case pr.steps != nil:
		return "steps"
	}
	return ""
}

func (in *inst) setProc(pr *proc) *proc {
	in.pmu.Lock()
	defer in.pmu.Unlock()
	old := in.pr
	in.pr = pr
	return old
}

func (in *inst) kill() {
	if pr := in.setProc(nil); pr != nil {
		pr.kill()
	}
}

func (in *inst) backoff() time.Duration {
	o := in.p.opts
	d := o.RestartBackoff
	for i := 1; i < in.fails && d < o.MaxRestartBackoff; i++ {
		d *= 2
	}
	return min(d, o.MaxRestartBackoff)
}

// ensure returns a running, initialized process, starting one (after the
// restart backoff, when the last one failed) if needed. Called with mu held.
func (in *inst) ensure(ctx context.Context) (*proc, error) {
	if in.closed {
		return nil, fmt.Errorf("flowlet %q instance %d: plugin used after Close", in.name, in.idx)
	}
	in.pmu.Lock()
	pr := in.pr
	in.pmu.Unlock()
	if pr != nil && !pr.exited() {
		return pr, nil
	}
	if pr != nil { // died between calls
		in.setProc(nil)
		pr.kill()
		in.fails++
		in.lastFail = time.Now()
		in.p.opts.Logger.Warn("plugin process exited between calls", "flowlet", in.name, "instance", in.idx)
	}
	if !in.inited { // used without Init (a test, say): instance 0 of 1, no config
		in.name, in.instances, in.configJSON, in.inited = in.p.flowlet, 1, "{}", true
	}
	if in.fails > 0 {
		if wait := in.backoff() - time.Since(in.lastFail); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		in.p.opts.Logger.Info("restarting plugin", "flowlet", in.name, "instance", in.idx, "failures", in.fails)
	}
	pr = in.p.takeSpare()
	if pr == nil {
		var err error
		if pr, err = in.p.start(ctx, in.idx); err != nil {
			in.fails++
			in.lastFail = time.Now()
			return nil, err
		}
	}
	pr.logs.setLogger(in.p.opts.Logger.With("flowlet", in.name, "instance", in.idx, "plugin", in.p.path))
	pr.host = &hostServer{in: in}
	pr.hostID = pr.broker.NextId()
	go pr.broker.AcceptAndServe(pr.hostID, func(opts []grpc.ServerOption) *grpc.Server {
		opts = append(opts, grpc.MaxRecvMsgSize(plugin.MaxMessageSize), grpc.MaxSendMsgSize(plugin.MaxMessageSize))
		s := grpc.NewServer(opts...)
		pb.RegisterHostServer(s, pr.host)
		return s
	})
	ictx, cancel := context.WithTimeout(ctx, in.p.opts.CallTimeout)
	defer cancel()
	_, err := pr.client.Init(ictx, &pb.InitRequest{Name: in.name, Instance: int32(in.idx), Instances: int32(in.instances),
		ConfigJson: in.configJSON, HostBrokerId: pr.hostID})
	if err != nil {
		st, ok := status.FromError(err)
		refused := ok && st.Code() == codes.FailedPrecondition && !pr.exited()
		timedOut := ctx.Err() == nil && errors.Is(ictx.Err(), context.DeadlineExceeded)
		exited := !refused && !timedOut && exitedByItself(pr)
		pr.kill()
		in.fails++
		in.lastFail = time.Now()
		if refused {
			return nil, &InitError{Flowlet: in.name, Instance: in.idx, Message: st.Message()}
		}
		return nil, in.callError("Init", err, timedOut, exited, pr)
	}
	// OpenChannel has a deadline of its own: an Init that took most of
	// its call timeout must not leave it too little.
	octx, ocancel := context.WithTimeout(ctx, in.p.opts.CallTimeout)
	defer ocancel()
	if err := pr.openChannel(octx); err != nil {
		if exited := pr.exited(); exited || ctx.Err() != nil {
			pr.kill()
			in.fails++
			in.lastFail = time.Now()
			return nil, in.callError("OpenChannel", err, false, exited, pr)
		}
		// A channel the plugin could not open (a socket path too long,
		// say, or not within its deadline) is no reason to fail: the Steps
		// stream carries the same steps over the gRPC connection (and the
		// call timeout bounds each of them).
		in.p.opts.Logger.Warn("plugin step channel unavailable; steps go over the gRPC stream", "flowlet", in.name, "instance", in.idx, "error", err)
	}
	if !in.p.adopt(in, pr) {
		pr.kill()
		return nil, &StartError{Flowlet: in.name, Path: in.p.path, Err: errors.New("the plugin was closed while the instance's process started")}
	}
	return pr, nil
}

var opNames = map[pb.StepCall_Op]string{
	pb.StepCall_PROCESS_BATCH: "ProcessBatch", pb.StepCall_GENERATE: "Generate", pb.StepCall_TICK: "Tick",
}

// step runs one step call: over the process's Steps stream (opened at the
// first step), or with the unary call when the plugin does not implement
// Steps. The call is bounded by the call timeout and by ctx; either ends
// the stream (the caller then kills the process).
func (in *inst) step(ctx context.Context, pr *proc, call *pb.StepCall) (resp *pb.StepResponse, timedOut bool, err error) {
	if pr.ch != nil {
		return in.channelStep(ctx, pr, call)
	}
	if !pr.noSteps {
		resp, timedOut, err = in.stream(ctx, pr, call)
		if status.Code(err) != codes.Unimplemented {
			return resp, timedOut, err
		}
		pr.smu.Lock()
		pr.noSteps = true // an older or foreign plugin: the step did not run
		pr.smu.Unlock()
		pr.closeSteps()
	}
	cctx, cancel := context.WithTimeout(ctx, in.p.opts.CallTimeout)
	defer cancel()
	switch call.Op {
	case pb.StepCall_PROCESS_BATCH:
		resp, err = pr.client.ProcessBatch(cctx, call.Batch)
	case pb.StepCall_GENERATE:
		resp, err = pr.client.Generate(cctx, call.Step)
	default:
		resp, err = pr.client.Tick(cctx, call.Step)
	}
	return resp, ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded), err
}

func (in *inst) stream(ctx context.Context, pr *proc, call *pb.StepCall) (*pb.StepResponse, bool, error) {
	st, err := pr.openSteps()
	if err != nil {
		return nil, false, err
	}
	// The deadline and ctx abort the step by ending this stream only (the
	// caller then kills the process). Either may fire just as the step
	// ends: then the step stands, the stream is dropped and the next step
	// opens a new one; this waits for the callback, so that it is done
	// before the next step starts.
	var timedOut atomic.Bool
	tdone, cdone := make(chan struct{}), make(chan struct{})
	t := time.AfterFunc(in.p.opts.CallTimeout, func() {
		defer close(tdone)
		timedOut.Store(true)
		pr.dropSteps(st)
	})
	stop := context.AfterFunc(ctx, func() {
		defer close(cdone)
		pr.dropSteps(st)
	})
	err = st.Send(call)
	var resp *pb.StepResponse
	if err == nil || errors.Is(err, io.EOF) { // on EOF, Recv has the stream's error
		resp, err = st.Recv()
	}
	if !t.Stop() {
		<-tdone
	}
	if !stop() {
		<-cdone
	}
	if err == nil && resp == nil {
		err = errors.New("empty step response")
	}
	return resp, timedOut.Load(), err
}

// channelStep runs a step over the process's step channel: one frame each
// way, written and read by this goroutine. The deadline and ctx abort it
// by expiring the connection's deadline (the caller then kills the
// process).
func (in *inst) channelStep(ctx context.Context, pr *proc, call *pb.StepCall) (*pb.StepResponse, bool, error) {
	c := pr.ch
	if err := c.SetDeadline(time.Now().Add(in.p.opts.CallTimeout)); err != nil {
		return nil, false, err
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		_ = c.SetDeadline(time.Unix(1, 0))
	})
	err := c.Write(call)
	if err == nil {
		// Decoded into the process's response, whose packed columns keep
		// their capacity from step to step; its payloads are slices of the
		// frame, valid until the next step's (ctx.Emit copies them).
		var b []byte
		if b, err = c.ReadFrame(); err == nil {
			if err = pr.dec.Decode(b, &pr.resp); err != nil {
				err = fmt.Errorf("flowrun step channel: unmarshal: %w", err)
			}
		}
	}
	if !stop() {
		// ctx was cancelled as the step ended: the past deadline must land
		// before the next step sets its own, not after (that step would
		// fail as a timeout and the process be killed).
		<-done
	}
	if err != nil {
		return nil, ctx.Err() == nil && errors.Is(err, os.ErrDeadlineExceeded), err
	}
	if got, want := pr.resp.GetCallId(), in.callID; got != want {
		// Never apply a response to another step than its own.
		return nil, false, fmt.Errorf("step channel: the response names step %d, this is step %d: host and plugin out of step (a plugin SDK of another version?)", got, want)
	}
	return &pr.resp, false, nil
}

// exitedByItself reports whether a failed call's process exited by
// itself, giving go-plugin a moment to see an exit (a crash breaks the
// connection a little before). Asked before the host kills the process:
// after its kill, every process has exited.
func exitedByItself(pr *proc) bool {
	for i := 0; i < 20 && !pr.exited(); i++ {
		time.Sleep(5 * time.Millisecond)
	}
	return pr.exited()
}

// callError describes a failed call; the process has been killed, by the
// host unless exited (exitedByItself before the kill).
func (in *inst) callError(op string, err error, timedOut, exited bool, pr *proc) error {
	ce := &CallError{Flowlet: in.name, Instance: in.idx, Op: op}
	switch {
	case timedOut:
		ce.Timeout = true
		ce.Err = fmt.Errorf("no answer within the deadline of %v; the plugin was killed and restarts at the next call", in.p.opts.CallTimeout)
	case exited:
		ce.Err = fmt.Errorf("the plugin process exited (%v); it restarts at the next call", err)
	default:
		ce.Err = fmt.Errorf("%w; the plugin was killed and restarts at the next call", err)
	}
	ce.Stderr = pr.logs.tail()
	return ce
}

// call runs one step RPC with ctx as the step's context and applies its
// response.
func (in *inst) call(ctx flowlet.Context, kind pb.StepCall_Op, evs []flowlet.Event, mk func(*pb.StepRequest) *pb.StepCall) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	op := opNames[kind]
	pr, err := in.ensure(ctx)
	if err != nil {
		return err
	}
	in.callID++
	_, canDL := ctx.(deadLetterer)
	_, canDLE := ctx.(eventDeadLetterer)
	req := &pb.StepRequest{CallId: in.callID, DeadLetter: canDL, DeadLetterEvent: canDL && canDLE}
	call := mk(req)
	in.cb.mu.Lock()
	in.cb.ctx, in.cb.id, in.cb.err = ctx, in.callID, nil
	in.cb.mu.Unlock()
	resp, timedOut, err := in.step(ctx, pr, call)
	in.cb.mu.Lock()
	cbErr := in.cb.err
	in.cb.ctx, in.cb.err = nil, nil
	in.cb.mu.Unlock()
	if err != nil {
		in.setProc(nil)
		exited := !timedOut && ctx.Err() == nil && exitedByItself(pr)
		pr.kill()
		in.fails++
		in.lastFail = time.Now()
		if ctx.Err() != nil {
			return fmt.Errorf("flowlet %q instance %d: plugin %s: %w", in.name, in.idx, op, ctx.Err())
		}
		return in.callError(op, err, timedOut, exited, pr)
	}
	in.fails = 0
	if cbErr != nil {
		return cbErr
	}
	return in.apply(ctx, op, resp, evs)
}

// apply applies a step's response, for the batch evs, through ctx: a
// plugin (of another SDK, or a broken one) may send anything here.
func (in *inst) apply(ctx flowlet.Context, op string, resp *pb.StepResponse, evs []flowlet.Event) error {
	var result error
	if e := resp.Error; e != nil {
		switch e.Kind {
		case pb.Error_IDLE:
			result = flowlet.ErrIdle
		case pb.Error_END_OF_INPUT:
			result = flowlet.ErrEndOfInput
		default:
			se := &StepError{Flowlet: in.name, Instance: in.idx, Op: op, Message: e.Message,
				Panic: e.Kind == pb.Error_PANIC, Stack: e.Stack, perm: e.Permanent}
			for _, i := range e.Events {
				se.Events = append(se.Events, int(i))
			}
			if se.Panic {
				in.p.opts.Logger.Error("plugin flowlet panicked", "flowlet", in.name, "instance", in.idx, "panic", e.Message, "stack", e.Stack)
			}
			return se
		}
	}
	if err := applyWrites(ctx, resp.Writes); err != nil {
		return err
	}
	if err := in.emitEach(ctx, resp.Emits); err != nil {
		return err
	}
	if err := in.emitPacked(ctx, resp.PackedEmits); err != nil {
		return err
	}
	if len(resp.DeadLetters) > 0 {
		dl, ok := ctx.(deadLetterer)
		if !ok {
			return fmt.Errorf("flowlet %q: the plugin dead-lettered events but this context cannot", in.name)
		}
		for _, d := range resp.DeadLetters {
			var err error
			if d.HasEvent {
				dle, ok := ctx.(eventDeadLetterer)
				switch {
				case !ok:
					err = fmt.Errorf("flowlet %q: the plugin dead-lettered an input event but this context cannot", in.name)
				case int(d.Event) >= len(evs):
					err = &ResponseError{Flowlet: in.name, Problem: fmt.Sprintf("a dead letter of event %d of a batch of %d", d.Event, len(evs))}
				default:
					err = dle.DeadLetterEvent(evs[d.Event], d.Reason)
				}
			} else {
				err = dl.DeadLetter(d.Payload, d.Reason)
			}
			if err != nil {
				return err
			}
		}
	}
	return result
}

// headers appends an emit's headers to opts. A priority beyond
// math.MaxUint8 (queue priorities are 0..255) is an error, not cut.
func (in *inst) headers(opts []flowlet.EmitOption, eventTime int64, traceID string, priority uint32) ([]flowlet.EmitOption, error) {
	if priority > math.MaxUint8 {
		return opts, &ResponseError{Flowlet: in.name, Problem: fmt.Sprintf("an emit of priority %d, beyond the queue's 0..255", priority)}
	}
	if eventTime != 0 {
		opts = append(opts, flowlet.EventTime(time.Unix(0, eventTime)))
	}
	if traceID != "" {
		opts = append(opts, flowlet.TraceID(traceID))
	}
	if priority != 0 {
		opts = append(opts, flowlet.Priority(uint8(priority)))
	}
	return opts, nil
}

// emitEach emits a step's emits (a message each) through ctx.
func (in *inst) emitEach(ctx flowlet.Context, emits []*pb.Emit) error {
	for _, e := range emits {
		opts := in.opts[:0]
		for _, kv := range e.Keys {
			opts = append(opts, flowlet.Key(kv.Name, kv.Value))
		}
		opts, err := in.headers(opts, e.EventTime, e.TraceId, e.Priority)
		in.opts = opts
		if err != nil {
			return err
		}
		if err := ctx.Emit(e.Output, e.Payload, opts...); err != nil {
			return err
		}
	}
	return nil
}

// emitPacked emits a step's packed emits through ctx, checking every
// offset and index (a plugin in another language may get them wrong).
func (in *inst) emitPacked(ctx flowlet.Context, p *pb.PackedEmits) error {
	n := len(p.GetOutputIndex())
	if n == 0 {
		return nil
	}
	bad := func(what string) error {
		return &ResponseError{Flowlet: in.name, Problem: "malformed packed emits (" + what + ")"}
	}
	if len(p.PayloadEnds) != n || (len(p.KeyCounts) != 0 && len(p.KeyCounts) != n) ||
		(len(p.EventTimes) != 0 && len(p.EventTimes) != n) || (len(p.TraceIds) != 0 && len(p.TraceIds) != n) ||
		(len(p.Priorities) != 0 && len(p.Priorities) != n) || len(p.KeyNameIndex) != len(p.KeyValueEnds) {
		return bad("column lengths differ")
	}
	values := string(p.KeyValues) // one allocation; key values are substrings
	var pe, ve uint32
	k := 0
	for i := range n {
		o, end := p.OutputIndex[i], p.PayloadEnds[i]
		if int(o) >= len(p.Outputs) || end < pe || int(end) > len(p.Payloads) {
			return bad("output index or payload offset")
		}
		opts := in.opts[:0]
		if len(p.KeyCounts) > 0 {
			c := int(p.KeyCounts[i])
			if k+c > len(p.KeyNameIndex) {
				return bad("key counts")
			}
			for ; c > 0; c-- {
				ni, vend := p.KeyNameIndex[k], p.KeyValueEnds[k]
				if int(ni) >= len(p.KeyNames) || vend < ve || int(vend) > len(values) {
					return bad("key name index or value offset")
				}
				opts = append(opts, flowlet.Key(p.KeyNames[ni], values[ve:vend]))
				ve = vend
				k++
			}
		}
		// Each header column is per emit or empty, independently.
		opts, err := in.headers(opts, at(p.EventTimes, i), at(p.TraceIds, i), at(p.Priorities, i))
		in.opts = opts
		if err != nil {
			return err
		}
		if err := ctx.Emit(p.Outputs[o], p.Payloads[pe:end:end], opts...); err != nil {
			return err
		}
		pe = end
	}
	return nil
}

// at returns column[i], or the zero value when the column is empty.
func at[T any](column []T, i int) T {
	var zero T
	if len(column) == 0 {
		return zero
	}
	return column[i]
}

// deadLetterer is the runtime's optional Context method (runtime.DeadLetterer).
type deadLetterer interface {
	DeadLetter(payload []byte, reason string) error
}

// eventDeadLetterer is the runtime's optional Context method
// (runtime.EventDeadLetterer).
type eventDeadLetterer interface {
	DeadLetterEvent(ev flowlet.Event, reason string) error
}

func (in *inst) processBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	if err := in.checkEvents(evs); err != nil {
		return err
	}
	defer func() {
		in.packed.Keys = nil // drop references to the caller's keys
		clear(in.keys)
		if cap(in.packed.Payloads) > maxKeptBuffer {
			in.packed.Payloads = nil
		}
	}()
	return in.call(ctx, pb.StepCall_PROCESS_BATCH, evs, func(step *pb.StepRequest) *pb.StepCall {
		in.batchReq = pb.BatchRequest{Step: step, Packed: in.pack(evs)}
		in.stepCall = pb.StepCall{Op: pb.StepCall_PROCESS_BATCH, Batch: &in.batchReq}
		return &in.stepCall
	})
}

// checkEvents refuses a batch with an event the request cannot carry, as
// the SDK refuses such an emit: an event time outside int64 Unix
// nanoseconds, 0 for none (before 1678, after 2262, the epoch itself),
// which the plugin would get as another time or none; key names and
// values and trace ids that are not UTF-8 (protobuf strings), which make
// the request unsendable, so that the plugin was killed at every attempt.
// Queues keep all of these. The error is permanent: the runtime
// dead-letters that event, intact, and processes the others one by one.
func (in *inst) checkEvents(evs []flowlet.Event) error {
	for i := range evs {
		e := &evs[i]
		var problem string
		if t := e.EventTime; !t.IsZero() && (t.UnixNano() == 0 || !time.Unix(0, t.UnixNano()).Equal(t)) {
			problem = fmt.Sprintf("event time %v cannot travel to the plugin, which takes 1678-2262 except the Unix epoch itself", t)
		} else if !utf8.ValidString(e.TraceID) {
			problem = fmt.Sprintf("trace id %s is not UTF-8 text, which the plugin's wire needs", quoteStart(e.TraceID))
		}
		for _, kv := range e.Keys {
			if problem == "" && (!utf8.ValidString(kv.Name) || !utf8.ValidString(kv.Value)) {
				problem = fmt.Sprintf("key %s = %s is not UTF-8 text, which the plugin's wire needs", quoteStart(kv.Name), quoteStart(kv.Value))
			}
		}
		if problem != "" {
			return flowlet.Permanent(fmt.Errorf("flowlet %q: event %q of %q: %s", in.name, e.ID, e.Input, problem))
		}
	}
	return nil
}

// quoteStart quotes s, or its first 64 bytes and its length when longer:
// the error is logged at each failure and kept in the dead-letter record,
// beside the text itself (a binary key may be large).
func quoteStart(s string) string {
	const n = 64
	if len(s) <= n {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:n], len(s))
}

// maxKeptBuffer bounds the batch buffer kept for the next call.
const maxKeptBuffer = 8 << 20

// pack packs a batch into in.packed (its buffers are reused from call to
// call; the request is marshalled before the call returns).
func (in *inst) pack(evs []flowlet.Event) *pb.PackedEvents {
	p := &in.packed
	p.Payloads, p.PayloadEnds, p.Ids, p.IdEnds = p.Payloads[:0], p.PayloadEnds[:0], p.Ids[:0], p.IdEnds[:0]
	p.Inputs, p.InputIndex, p.EventTimes, p.TraceIds, p.Keys = p.Inputs[:0], p.InputIndex[:0], p.EventTimes[:0], p.TraceIds[:0], nil
	in.keys = in.keys[:0]
	var times, traces bool
	for i := range evs {
		e := &evs[i]
		p.Payloads = append(p.Payloads, e.Payload...)
		p.PayloadEnds = append(p.PayloadEnds, uint32(len(p.Payloads)))
		p.Ids = append(p.Ids, e.ID...)
		p.IdEnds = append(p.IdEnds, uint32(len(p.Ids)))
		k := index(&p.Inputs, e.Input)
		if k != 0 && len(p.InputIndex) == 0 {
			p.InputIndex = append(p.InputIndex, make([]uint32, i)...)
		}
		if len(p.InputIndex) > 0 {
			p.InputIndex = append(p.InputIndex, k)
		}
		times = times || !e.EventTime.IsZero()
		traces = traces || e.TraceID != ""
		if len(e.Keys) > 0 {
			ek := &pb.EventKeys{Event: uint32(i), Keys: make([]*pb.KeyValue, len(e.Keys))}
			for j, kv := range e.Keys {
				ek.Keys[j] = &pb.KeyValue{Name: kv.Name, Value: kv.Value}
			}
			in.keys = append(in.keys, ek)
		}
	}
	if times {
		for i := range evs {
			var t int64
			if !evs[i].EventTime.IsZero() {
				t = evs[i].EventTime.UnixNano()
			}
			p.EventTimes = append(p.EventTimes, t)
		}
	}
	if traces {
		for i := range evs {
			p.TraceIds = append(p.TraceIds, evs[i].TraceID)
		}
	}
	p.Keys = in.keys
	return p
}

// index returns the position of s in *list, appending it if missing.
func index(list *[]string, s string) uint32 {
	for i, v := range *list {
		if v == s {
			return uint32(i)
		}
	}
	*list = append(*list, s)
	return uint32(len(*list) - 1)
}

func (in *inst) tick(ctx flowlet.Context) error {
	return in.call(ctx, pb.StepCall_TICK, nil, func(step *pb.StepRequest) *pb.StepCall {
		return &pb.StepCall{Op: pb.StepCall_TICK, Step: step}
	})
}

func (in *inst) generate(ctx flowlet.Context) error {
	return in.call(ctx, pb.StepCall_GENERATE, nil, func(step *pb.StepRequest) *pb.StepCall {
		return &pb.StepCall{Op: pb.StepCall_GENERATE, Step: step}
	})
}

func applyWrites(ctx flowlet.Context, ws []*pb.StateOp) error {
	for _, w := range ws {
		var err error
		switch w.Kind {
		case pb.StateOp_PUT:
			err = ctx.State(w.Name).Put(w.Key, w.Value)
		case pb.StateOp_DELETE:
			err = ctx.State(w.Name).Delete(w.Key)
		case pb.StateOp_ADD:
			err = ctx.Counters(w.Name).Add(w.Key, w.Delta)
		default:
			err = fmt.Errorf("unknown state operation %v", w.Kind)
		}
		if err != nil {
			return fmt.Errorf("plugin state write (%v %s): %w", w.Kind, w.Name, err)
		}
	}
	return nil
}

// hostServer serves the Host service (state reads) to one plugin process,
// against the Context of the step in progress.
type hostServer struct {
	pb.UnimplementedHostServer
	in *inst
}

// begin returns the step's Context, with in.cb.mu held (release with
// end), after applying writes.
func (h *hostServer) begin(id uint64, writes []*pb.StateOp) (flowlet.Context, error) {
	cb := &h.in.cb
	cb.mu.Lock()
	if cb.ctx == nil || cb.id != id {
		cb.mu.Unlock()
		return nil, status.Errorf(codes.FailedPrecondition, "pluginhost: step %d is not in progress", id)
	}
	if err := applyWrites(cb.ctx, writes); err != nil {
		if cb.err == nil {
			cb.err = err
		}
		cb.mu.Unlock()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return cb.ctx, nil
}

func (h *hostServer) end() { h.in.cb.mu.Unlock() }

func (h *hostServer) Get(_ context.Context, r *pb.GetRequest) (*pb.GetResponse, error) {
	ctx, err := h.begin(r.CallId, r.Writes)
	if err != nil {
		return nil, err
	}
	defer h.end()
	v, ok, err := ctx.State(r.Table).Get(r.Key)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.GetResponse{Value: v, Found: ok}, nil
}

func (h *hostServer) CounterGet(_ context.Context, r *pb.CounterGetRequest) (*pb.CounterGetResponse, error) {
	ctx, err := h.begin(r.CallId, r.Writes)
	if err != nil {
		return nil, err
	}
	defer h.end()
	n, err := ctx.Counters(r.Counters).Get(r.Key)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.CounterGetResponse{Count: n}, nil
}

const (
	defaultScanPage = 512
	maxScanPage     = 8192
	// maxScanPageBytes bounds a page's keys and values (past the first
	// entry): well under plugin.MaxMessageSize, which a page of large
	// values exceeded (the plugin could not scan the table at all).
	maxScanPageBytes = 16 << 20
)

func (h *hostServer) Scan(_ context.Context, r *pb.ScanRequest) (*pb.ScanResponse, error) {
	ctx, err := h.begin(r.CallId, r.Writes)
	if err != nil {
		return nil, err
	}
	defer h.end()
	page := int(r.Limit)
	if page <= 0 {
		page = defaultScanPage
	}
	page = min(page, maxScanPage)
	o := flowlet.ScanOptions{Prefix: r.Prefix, Limit: page + 1}
	if r.HasStart {
		o.Start = nonNil(r.Start)
	}
	if r.HasEnd {
		o.End = nonNil(r.End)
	}
	resp := &pb.ScanResponse{}
	held := 0
	// full reports whether the page is done before an entry of size bytes.
	full := func(size int) bool {
		held += size
		if len(resp.Entries) == page || len(resp.Entries) > 0 && held > maxScanPageBytes {
			resp.More = true
			return true
		}
		return false
	}
	if r.Counters {
		it := ctx.Counters(r.Name).Scan(o)
		for it.Next() {
			if full(len(it.Key()) + 8) {
				break
			}
			resp.Entries = append(resp.Entries, &pb.ScanEntry{Key: clone(it.Key()), Count: it.Count()})
		}
		err = errors.Join(it.Err(), it.Close())
	} else {
		it := ctx.State(r.Name).Scan(o)
		for it.Next() {
			if full(len(it.Key()) + len(it.Value())) {
				break
			}
			resp.Entries = append(resp.Entries, &pb.ScanEntry{Key: clone(it.Key()), Value: clone(it.Value())})
		}
		err = errors.Join(it.Err(), it.Close())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return resp, nil
}

func (h *hostServer) Apply(_ context.Context, r *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	if _, err := h.begin(r.CallId, r.Writes); err != nil {
		return nil, err
	}
	h.end()
	return &pb.ApplyResponse{}, nil
}

func clone(b []byte) []byte { return append([]byte{}, b...) }

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
