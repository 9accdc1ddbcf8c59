package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// scanPage is how many entries a Scan fetches from the host per call.
const scanPage = 512

// stepCtx is what a call's flowlet.Context (callCtx) writes to: it
// collects emits, writes and dead letters for the response and sends reads
// to the host. Emits are packed (pb.PackedEmits) into buffers reused from
// call to call: the response is marshalled before the host can make the
// next call.
type stepCtx struct {
	// mu serializes the calls of goroutines of a step on its Context, as
	// the runtime's does (they tore the buffers below), and their calls
	// with the step's end.
	mu sync.Mutex
	context.Context
	s      *server
	callID uint64
	seq    uint64 // counts the calls: what an earlier one gave out is ended
	packed pb.PackedEmits
	writes []*pb.StateOp
	dead   []*pb.DeadLetter
	failed error // a state call or emit failed: the step must fail even if the flowlet ignores it
	ended  bool  // the call returned: the flowlet kept the Context too long
	keyed  bool  // some emit of the call has keys (key_counts is filled)
	headed bool  // some emit has a header (event time, trace id, priority)
	dlNext int   // where DeadLetterEvent starts looking for its event
	resp   pb.StepResponse
	opts   flowlet.EmitOptions // an emit's resolved options, reused (Resolve)
	// callDone is the call's own context once its Done was asked for (a
	// goroutine may wait on it, or on a context derived from it):
	// cancelled with flowlet.ErrStepEnded when the call returns, as in the
	// runtime, where the host's context (the step channel's, the Steps
	// stream's) lasts from step to step.
	callDone   context.Context
	callCancel context.CancelCauseFunc
}

// callCtx is the flowlet.Context of one call. It is made for each call
// while the stepCtx it writes to is reused, so that a Context kept from an
// earlier call (in a field, in a goroutine) is told apart from the current
// one: it is ended, as are the tables and iterators it gave out.
type callCtx struct {
	c   *stepCtx
	seq uint64 // the call's
}

// dlCallCtx can dead-letter, offered when the host's context can.
type dlCallCtx struct{ callCtx }

// dleCallCtx can dead-letter input events too (DeadLetterEvent), offered
// when the host's context can.
type dleCallCtx struct{ dlCallCtx }

// ctx is the call's context.Context while the call runs, a done one after.
func (k *callCtx) ctx() context.Context {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	if k.c.check(k.seq, nil) != nil {
		return endedContext
	}
	if d := k.c.callDone; d != nil {
		return d
	}
	return k.c.Context
}

// Deadline implements context.Context.
func (k *callCtx) Deadline() (time.Time, bool) { return k.ctx().Deadline() }

// Done implements context.Context: closed once the call returned, the
// channel given during the call too.
func (k *callCtx) Done() <-chan struct{} {
	c := k.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.check(k.seq, nil) != nil {
		return endedContext.Done()
	}
	if c.callDone == nil {
		c.callDone, c.callCancel = context.WithCancelCause(c.Context)
	}
	return c.callDone.Done()
}

// Err implements context.Context.
func (k *callCtx) Err() error { return k.ctx().Err() }

// Value implements context.Context.
func (k *callCtx) Value(key any) any { return k.ctx().Value(key) }

// Emit implements flowlet.Context.
func (k *callCtx) Emit(output string, payload []byte, opts ...flowlet.EmitOption) error {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	if err := k.c.check(k.seq, nil); err != nil {
		return err
	}
	return k.c.emit(output, payload, opts)
}

// State implements flowlet.Context.
func (k *callCtx) State(name string) flowlet.Table { return table{k.c, name, k.seq} }

// Counters implements flowlet.Context.
func (k *callCtx) Counters(name string) flowlet.Counters { return counters{k.c, name, k.seq} }

// Name implements flowlet.Context.
func (k *callCtx) Name() string { return k.c.s.name }

// Instance implements flowlet.Context.
func (k *callCtx) Instance() int { return k.c.s.inst }

// Instances implements flowlet.Context.
func (k *callCtx) Instances() int { return k.c.s.insts }

// Logger implements flowlet.Context.
func (k *callCtx) Logger() *slog.Logger { return k.c.s.logger }

// DeadLetter moves payload to the flowlet's dead-letter queue in the step's
// transaction, with reason (the runtime's optional Context method).
func (k *dlCallCtx) DeadLetter(payload []byte, reason string) error {
	c := k.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(k.seq, nil); err != nil {
		return err
	}
	c.dead = append(c.dead, &pb.DeadLetter{Payload: bytes.Clone(payload), Reason: validText(reason)})
	return nil
}

// DeadLetterEvent moves an input event of the step to the flowlet's
// dead-letter queue with its input queue and id, in the step's transaction
// (the runtime's optional Context method): `flowrun dlq replay` can replay
// it. ev must be one of the step's events (matched by input and id).
func (k *dleCallCtx) DeadLetterEvent(ev flowlet.Event, reason string) error {
	c := k.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check(k.seq, nil); err != nil {
		return err
	}
	evs := c.s.evs
	for k := range evs {
		i := (c.dlNext + k) % len(evs)
		if evs[i].ID == ev.ID && evs[i].Input == ev.Input {
			c.dlNext = i + 1
			c.dead = append(c.dead, &pb.DeadLetter{Reason: validText(reason), HasEvent: true, Event: uint32(i)})
			return nil
		}
	}
	return fmt.Errorf("flowrun plugin: DeadLetterEvent: event %q of %q is not an input of this step", ev.ID, ev.Input)
}

// validText is a dead letter's reason as the response can carry it (a
// protobuf string: UTF-8), bytes that are not UTF-8 (a reason made from a
// payload, say) replaced by U+FFFD.
func validText(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

var (
	_ flowlet.Context = (*callCtx)(nil)
	_ flowlet.Context = (*dlCallCtx)(nil)
	_ flowlet.Context = (*dleCallCtx)(nil)
)

func (c *stepCtx) reset(ctx context.Context, id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Context, c.callID, c.ended = ctx, id, false
	c.seq++
	c.writes, c.dead, c.failed = nil, nil, nil
	c.dlNext = 0
	p := &c.packed
	if cap(p.Payloads) > maxKeptBuffer {
		p.Payloads = nil
	}
	p.Outputs, p.OutputIndex, p.Payloads, p.PayloadEnds = p.Outputs[:0], p.OutputIndex[:0], p.Payloads[:0], p.PayloadEnds[:0]
	p.KeyNames, p.KeyCounts, p.KeyNameIndex, p.KeyValues, p.KeyValueEnds = p.KeyNames[:0], p.KeyCounts[:0], p.KeyNameIndex[:0], p.KeyValues[:0], p.KeyValueEnds[:0]
	p.EventTimes, p.TraceIds, p.Priorities = p.EventTimes[:0], p.TraceIds[:0], p.Priorities[:0]
	c.keyed, c.headed = false, false
}

// response is the call's response; it is valid until the next call.
func (c *stepCtx) response(err error) *pb.StepResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	// An idle or ended Generate commits, but not over a failed call.
	if c.failed != nil && (err == nil || errors.Is(err, flowlet.ErrIdle) || errors.Is(err, flowlet.ErrEndOfInput)) {
		err = fmt.Errorf("a call of the step failed: %w", c.failed)
	}
	r := &c.resp
	*r = pb.StepResponse{Error: wireError(err)}
	if err == nil || r.Error.Kind == pb.Error_IDLE || r.Error.Kind == pb.Error_END_OF_INPUT {
		r.Writes, r.DeadLetters = c.writes, c.dead
		if len(c.packed.OutputIndex) > 0 {
			r.PackedEmits = &c.packed
		}
	}
	// The call's context is dropped; one that is done stands in for it, so
	// that a kept Context says the step is over instead of panicking.
	c.writes, c.dead, c.Context, c.ended = nil, nil, endedContext, true
	if c.callCancel != nil {
		c.callCancel(flowlet.ErrStepEnded)
		c.callDone, c.callCancel = nil, nil
	}
	return r
}

// endedContext is the context.Context of a stepCtx between calls.
var endedContext = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(flowlet.ErrStepEnded)
	return ctx
}()

// maxKeptBuffer bounds the emit buffer kept for the next call.
const maxKeptBuffer = 8 << 20

// emit packs an emit of the call.
func (c *stepCtx) emit(output string, payload []byte, opts []flowlet.EmitOption) error {
	o := &c.opts
	if len(opts) > 0 {
		o.Resolve(opts)
		if err := wireOptions(o); err != nil {
			return c.fail(fmt.Errorf("flowrun plugin: emit on %q: %w", output, err))
		}
	}
	if !utf8.ValidString(output) {
		return c.fail(fmt.Errorf("flowrun plugin: emit on output %q: the name is not UTF-8 text", output))
	}
	p := &c.packed
	n := len(p.OutputIndex)
	p.OutputIndex = append(p.OutputIndex, index(&p.Outputs, output))
	p.Payloads = append(p.Payloads, payload...)
	p.PayloadEnds = append(p.PayloadEnds, uint32(len(p.Payloads)))
	if len(opts) == 0 {
		if c.keyed {
			p.KeyCounts = append(p.KeyCounts, 0)
		}
		if c.headed {
			p.EventTimes, p.TraceIds, p.Priorities = append(p.EventTimes, 0), append(p.TraceIds, ""), append(p.Priorities, 0)
		}
		return nil
	}
	if len(o.Keys) > 0 && !c.keyed {
		c.keyed = true
		p.KeyCounts = append(p.KeyCounts, make([]uint32, n)...)
	}
	if c.keyed {
		p.KeyCounts = append(p.KeyCounts, uint32(len(o.Keys)))
		for _, kv := range o.Keys {
			p.KeyNameIndex = append(p.KeyNameIndex, index(&p.KeyNames, kv.Name))
			p.KeyValues = append(p.KeyValues, kv.Value...)
			p.KeyValueEnds = append(p.KeyValueEnds, uint32(len(p.KeyValues)))
		}
	}
	if (!o.EventTime.IsZero() || o.TraceID != "" || o.Priority != 0) && !c.headed {
		c.headed = true
		p.EventTimes, p.TraceIds, p.Priorities = make([]int64, n), make([]string, n), make([]uint32, n)
	}
	if c.headed {
		var et int64
		if !o.EventTime.IsZero() {
			et = o.EventTime.UnixNano()
		}
		p.EventTimes, p.TraceIds, p.Priorities = append(p.EventTimes, et), append(p.TraceIds, o.TraceID), append(p.Priorities, uint32(o.Priority))
	}
	return nil
}

// wireOptions reports what of an emit's options the response cannot
// carry, so that the emit is refused (as the host refuses what it cannot
// take) instead of the whole response failing to marshal or an option
// arriving changed: its text fields are protobuf strings, which must be
// UTF-8, and its event time is int64 nanoseconds since the epoch, 0 for
// none. (A trace id that is not UTF-8 still makes the response unsendable:
// the host fails the step with a CallError naming the cause.)
func wireOptions(o *flowlet.EmitOptions) error {
	if t := o.EventTime; !t.IsZero() && (t.UnixNano() == 0 || !time.Unix(0, t.UnixNano()).Equal(t)) {
		return fmt.Errorf("event time %v cannot travel to the host, which takes 1678-2262 except the Unix epoch itself", t)
	}
	for _, kv := range o.Keys {
		if !utf8.ValidString(kv.Name) {
			return fmt.Errorf("key name %q is not UTF-8 text", kv.Name)
		}
	}
	return nil
}

// index returns the position of s in *list, appending it if missing (the
// lists are short: a flowlet's outputs, its key names).
func index(list *[]string, s string) uint32 {
	for i, v := range *list {
		if v == s {
			return uint32(i)
		}
	}
	*list = append(*list, s)
	return uint32(len(*list) - 1)
}

var errNoHost = errors.New("flowrun plugin: no connection to the host for state calls")

// take returns the buffered writes, to send with a read.
func (c *stepCtx) take() []*pb.StateOp {
	w := c.writes
	c.writes = nil
	return w
}

func (c *stepCtx) fail(err error) error {
	if c.failed == nil {
		c.failed = err
	}
	return err
}

// check reports why a Context, table or counters handle of call seq cannot
// be used with key: its call ended, or key is too long (refused here, the
// host never sees it, so it fails the call as the host's refusal would).
func (c *stepCtx) check(seq uint64, key []byte) error {
	if c.ended || c.seq != seq {
		return flowlet.ErrStepEnded
	}
	if len(key) > flowlet.MaxKeySize {
		return c.fail(fmt.Errorf("flowrun plugin: %w: %d bytes, at most %d", flowlet.ErrKeyTooLarge, len(key), flowlet.MaxKeySize))
	}
	return nil
}

// checkState is check for a call on the table or counters (kind) of that
// name: a bad name is refused here too, typed, and fails the call as the
// host's refusal would.
func (c *stepCtx) checkState(seq uint64, kind, name string, key []byte) error {
	if err := c.check(seq, nil); err != nil {
		return err
	}
	if !flowlet.ValidStateName(name) {
		return c.fail(fmt.Errorf("flowrun plugin: %w: %s %q (want [a-z0-9][a-z0-9_-]{0,62})", flowlet.ErrInvalidName, kind, name))
	}
	return c.check(seq, key)
}

type table struct {
	c    *stepCtx
	name string
	id   uint64 // the seq of the call that made it
}

func (t table) Get(key []byte) ([]byte, bool, error) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if err := t.c.checkState(t.id, "table", t.name, key); err != nil {
		return nil, false, err
	}
	c := t.c
	if c.s.host == nil {
		return nil, false, c.fail(errNoHost)
	}
	r, err := c.s.host.Get(c, &pb.GetRequest{CallId: c.callID, Writes: c.take(), Table: t.name, Key: key})
	if err != nil {
		return nil, false, c.fail(err)
	}
	return r.Value, r.Found, nil
}

func (t table) Put(key, value []byte) error {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if err := t.c.checkState(t.id, "table", t.name, key); err != nil {
		return err
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	t.c.writes = append(t.c.writes, &pb.StateOp{Kind: pb.StateOp_PUT, Name: t.name, Key: bytes.Clone(key), Value: v})
	return nil
}

func (t table) Delete(key []byte) error {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if err := t.c.checkState(t.id, "table", t.name, key); err != nil {
		return err
	}
	t.c.writes = append(t.c.writes, &pb.StateOp{Kind: pb.StateOp_DELETE, Name: t.name, Key: bytes.Clone(key)})
	return nil
}

func (t table) Scan(o flowlet.ScanOptions) flowlet.Iterator {
	return &iter{c: t.c, id: t.id, name: t.name, opts: o}
}

type counters struct {
	c    *stepCtx
	name string
	id   uint64 // the seq of the call that made it
}

func (n counters) Add(key []byte, delta int64) error {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if err := n.c.checkState(n.id, "counters", n.name, key); err != nil {
		return err
	}
	n.c.writes = append(n.c.writes, &pb.StateOp{Kind: pb.StateOp_ADD, Name: n.name, Key: bytes.Clone(key), Delta: delta})
	return nil
}

func (n counters) Get(key []byte) (int64, error) {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if err := n.c.checkState(n.id, "counters", n.name, key); err != nil {
		return 0, err
	}
	c := n.c
	if c.s.host == nil {
		return 0, c.fail(errNoHost)
	}
	r, err := c.s.host.CounterGet(c, &pb.CounterGetRequest{CallId: c.callID, Writes: c.take(), Counters: n.name, Key: key})
	if err != nil {
		return 0, c.fail(err)
	}
	return r.Count, nil
}

func (n counters) Scan(o flowlet.ScanOptions) flowlet.CounterIterator {
	return &iter{c: n.c, id: n.id, name: n.name, opts: o, counters: true}
}

// iter fetches a scan from the host a page at a time; each page starts just
// after the last key of the previous one.
type iter struct {
	c        *stepCtx
	id       uint64 // the seq of the call that made it
	name     string
	counters bool
	opts     flowlet.ScanOptions
	page     []*pb.ScanEntry
	pos      int
	seen     int
	more     bool
	started  bool
	after    []byte
	err      error
	closed   bool
}

func (it *iter) fetch() bool {
	c := it.c
	kind := "table"
	if it.counters {
		kind = "counters"
	}
	if err := c.checkState(it.id, kind, it.name, nil); err != nil {
		it.err = err
		return false
	}
	if c.s.host == nil {
		it.err = c.fail(errNoHost)
		return false
	}
	req := &pb.ScanRequest{CallId: c.callID, Writes: c.take(), Name: it.name, Counters: it.counters,
		Prefix: it.opts.Prefix, Start: it.opts.Start, End: it.opts.End,
		HasStart: it.opts.Start != nil, HasEnd: it.opts.End != nil, Limit: scanPage}
	if it.after != nil {
		req.Start, req.HasStart = append(bytes.Clone(it.after), 0), true
	}
	if it.opts.Limit > 0 {
		req.Limit = int32(min(scanPage, it.opts.Limit-it.seen))
	}
	r, err := c.s.host.Scan(c, req)
	if err != nil {
		it.err = c.fail(err)
		return false
	}
	it.page, it.pos, it.more, it.started = r.Entries, 0, r.More, true
	if n := len(r.Entries); n > 0 {
		it.after = r.Entries[n-1].Key
	}
	return true
}

func (it *iter) Next() bool {
	it.c.mu.Lock()
	defer it.c.mu.Unlock()
	if it.err == nil {
		it.err = it.c.check(it.id, nil)
	}
	if it.err != nil || it.closed || (it.opts.Limit > 0 && it.seen >= it.opts.Limit) {
		return false
	}
	if !it.started || (it.pos >= len(it.page) && it.more) {
		if !it.fetch() {
			return false
		}
	}
	if it.pos >= len(it.page) {
		return false
	}
	it.pos++
	it.seen++
	return true
}

// cur is the current entry: empty before the first Next, as in the runtime.
func (it *iter) cur() *pb.ScanEntry {
	if it.pos == 0 {
		return &pb.ScanEntry{}
	}
	return it.page[it.pos-1]
}

func (it *iter) Key() []byte   { return it.cur().Key }
func (it *iter) Value() []byte { return it.cur().Value }
func (it *iter) Count() int64  { return it.cur().Count }
func (it *iter) Err() error    { return it.err }
func (it *iter) Close() error  { it.closed = true; return nil }
