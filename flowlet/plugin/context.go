package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// scanPage is how many entries a Scan fetches from the host per call.
const scanPage = 512

// stepCtx is the flowlet.Context of one call: it collects emits, writes and
// dead letters for the response and sends reads to the host.
type stepCtx struct {
	context.Context
	s      *server
	callID uint64
	emits  []*pb.Emit
	writes []*pb.StateOp
	dead   []*pb.DeadLetter
	failed error // a read failed: the step must fail even if the flowlet ignores it
}

// dlCtx is a stepCtx that can dead-letter, offered when the host's context
// can.
type dlCtx struct{ *stepCtx }

// DeadLetter moves payload to the flowlet's dead-letter queue in the step's
// transaction, with reason (the runtime's optional Context method).
func (c *dlCtx) DeadLetter(payload []byte, reason string) error {
	c.dead = append(c.dead, &pb.DeadLetter{Payload: bytes.Clone(payload), Reason: reason})
	return nil
}

var (
	_ flowlet.Context = (*stepCtx)(nil)
	_ flowlet.Context = (*dlCtx)(nil)
)

func (c *stepCtx) reset(ctx context.Context, id uint64) {
	c.Context, c.callID = ctx, id
	c.emits, c.writes, c.dead, c.failed = nil, nil, nil, nil
}

func (c *stepCtx) response(err error) *pb.StepResponse {
	if err == nil && c.failed != nil {
		err = fmt.Errorf("a state read failed: %w", c.failed)
	}
	r := &pb.StepResponse{Error: wireError(err)}
	if err == nil || r.Error.Kind == pb.Error_IDLE || r.Error.Kind == pb.Error_END_OF_INPUT {
		r.Emits, r.Writes, r.DeadLetters = c.emits, c.writes, c.dead
	}
	c.emits, c.writes, c.dead, c.Context = nil, nil, nil, nil
	return r
}

// Emit implements flowlet.Context.
func (c *stepCtx) Emit(output string, payload []byte, opts ...flowlet.EmitOption) error {
	e := &pb.Emit{Output: output, Payload: bytes.Clone(payload)}
	if e.Payload == nil {
		e.Payload = []byte{}
	}
	if len(opts) > 0 {
		o := flowlet.ResolveEmitOptions(opts)
		if len(o.Keys) > 0 {
			e.Keys = make([]*pb.KeyValue, len(o.Keys))
			for i, kv := range o.Keys {
				e.Keys[i] = &pb.KeyValue{Name: kv.Name, Value: kv.Value}
			}
		}
		if !o.EventTime.IsZero() {
			e.EventTime = o.EventTime.UnixNano()
		}
		e.TraceId, e.Priority = o.TraceID, uint32(o.Priority)
	}
	c.emits = append(c.emits, e)
	return nil
}

// State implements flowlet.Context.
func (c *stepCtx) State(name string) flowlet.Table { return table{c, name} }

// Counters implements flowlet.Context.
func (c *stepCtx) Counters(name string) flowlet.Counters { return counters{c, name} }

// Name implements flowlet.Context.
func (c *stepCtx) Name() string { return c.s.name }

// Instance implements flowlet.Context.
func (c *stepCtx) Instance() int { return c.s.inst }

// Instances implements flowlet.Context.
func (c *stepCtx) Instances() int { return c.s.insts }

// Logger implements flowlet.Context.
func (c *stepCtx) Logger() *slog.Logger { return c.s.logger }

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

func checkKey(key []byte) error {
	if len(key) > flowlet.MaxKeySize {
		return fmt.Errorf("flowrun plugin: key of %d bytes exceeds %d", len(key), flowlet.MaxKeySize)
	}
	return nil
}

type table struct {
	c    *stepCtx
	name string
}

func (t table) Get(key []byte) ([]byte, bool, error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	c := t.c
	if c.s.host == nil {
		return nil, false, errNoHost
	}
	r, err := c.s.host.Get(c, &pb.GetRequest{CallId: c.callID, Writes: c.take(), Table: t.name, Key: key})
	if err != nil {
		return nil, false, c.fail(err)
	}
	return r.Value, r.Found, nil
}

func (t table) Put(key, value []byte) error {
	if err := checkKey(key); err != nil {
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
	if err := checkKey(key); err != nil {
		return err
	}
	t.c.writes = append(t.c.writes, &pb.StateOp{Kind: pb.StateOp_DELETE, Name: t.name, Key: bytes.Clone(key)})
	return nil
}

func (t table) Scan(o flowlet.ScanOptions) flowlet.Iterator {
	return &iter{c: t.c, name: t.name, opts: o}
}

type counters struct {
	c    *stepCtx
	name string
}

func (n counters) Add(key []byte, delta int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	n.c.writes = append(n.c.writes, &pb.StateOp{Kind: pb.StateOp_ADD, Name: n.name, Key: bytes.Clone(key), Delta: delta})
	return nil
}

func (n counters) Get(key []byte) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	c := n.c
	if c.s.host == nil {
		return 0, errNoHost
	}
	r, err := c.s.host.CounterGet(c, &pb.CounterGetRequest{CallId: c.callID, Writes: c.take(), Counters: n.name, Key: key})
	if err != nil {
		return 0, c.fail(err)
	}
	return r.Count, nil
}

func (n counters) Scan(o flowlet.ScanOptions) flowlet.CounterIterator {
	return &iter{c: n.c, name: n.name, opts: o, counters: true}
}

// iter fetches a scan from the host a page at a time; each page starts just
// after the last key of the previous one.
type iter struct {
	c        *stepCtx
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
	if c.s.host == nil {
		it.err = errNoHost
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

func (it *iter) Key() []byte   { return it.page[it.pos-1].Key }
func (it *iter) Value() []byte { return it.page[it.pos-1].Value }
func (it *iter) Count() int64  { return it.page[it.pos-1].Count }
func (it *iter) Err() error    { return it.err }
func (it *iter) Close() error  { it.closed = true; return nil }
