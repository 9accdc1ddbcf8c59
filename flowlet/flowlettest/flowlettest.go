package flowlettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowrun/flowrun/flowlet"
)

// Emitted is one emitted event.
type Emitted struct {
	Output  string
	Payload []byte
	flowlet.EmitOptions
}

// Context is a fake flowlet.Context. It is always inside a step: writes and
// emits are pending until Commit, and Abort drops them. Process, Generate
// and Tick run a whole step and commit or abort it by the flowlet's result;
// the flowlet gets a Context of its own for each call, as in the runtime
// (see call). The methods of Context itself are not safe for concurrent
// use.
type Context struct {
	context.Context
	name                string
	instance, instances int
	logger              *slog.Logger
	keys                map[string]string // output → required partition key
	outputs             []string          // when set, the only valid outputs

	tables   map[string]*table
	counters map[string]*counters
	emitted  []Emitted
	pending  []Emitted
	callErr  error // the step's first failed Emit or state call: it fails the step, as in the runtime
	dead     []DeadLetter
	deadPend []DeadLetter
}

// DeadLetter is an event a step put in the dead-letter queue itself
// (DeadLetter or DeadLetterEvent).
type DeadLetter struct {
	Payload []byte
	Reason  string
	// Event is the input event, for DeadLetterEvent; nil for DeadLetter.
	Event *flowlet.Event
}

var _ flowlet.Context = (*Context)(nil)

// New returns a Context for a flowlet of that name, instance 0 of 1, logging
// nowhere.
func New(name string) *Context {
	return &Context{
		Context:   context.Background(),
		name:      name,
		instances: 1,
		logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		keys:      map[string]string{},
		tables:    map[string]*table{},
		counters:  map[string]*counters{},
	}
}

// WithInstance sets the instance index and count.
func (c *Context) WithInstance(i, n int) *Context { c.instance, c.instances = i, n; return c }

// WithLogger sets the logger.
func (c *Context) WithLogger(l *slog.Logger) *Context { c.logger = l; return c }

// WithOutputs restricts Emit to the named outputs, as a type's TypeInfo does.
func (c *Context) WithOutputs(outputs ...string) *Context { c.outputs = outputs; return c }

// RequireKey makes Emit on output fail without the partition key name, as
// the runtime does for a hash-partitioned queue.
func (c *Context) RequireKey(output, name string) *Context { c.keys[output] = name; return c }

// Emit implements flowlet.Context.
func (c *Context) Emit(output string, payload []byte, opts ...flowlet.EmitOption) error {
	fail := c.failed
	if c.outputs != nil && !slices.Contains(c.outputs, output) {
		return fail(fmt.Errorf("flowlettest: flowlet %q has no output %q (outputs: %s)", c.name, output, strings.Join(c.outputs, ", ")))
	}
	o := flowlet.ResolveEmitOptions(opts)
	if k, ok := c.keys[output]; ok {
		if _, set := o.Key(k); !set {
			return fail(fmt.Errorf("flowlettest: emit on %q without its partition key %q", output, k))
		}
	}
	c.pending = append(c.pending, Emitted{Output: output, Payload: bytes.Clone(payload), EmitOptions: o})
	return nil
}

// failed records err, if any, as the step's callErr and returns it.
func (c *Context) failed(err error) error {
	if err != nil && c.callErr == nil {
		c.callErr = err
	}
	return err
}

// DeadLetter puts payload in the flowlet's dead-letter queue with the step,
// as the runtime's Context does (runtime.DeadLetterer).
func (c *Context) DeadLetter(payload []byte, reason string) error {
	c.deadPend = append(c.deadPend, DeadLetter{Payload: bytes.Clone(payload), Reason: reason})
	return nil
}

// DeadLetterEvent puts an input event in the flowlet's dead-letter queue
// with the step, as the runtime's Context does (runtime.EventDeadLetterer).
func (c *Context) DeadLetterEvent(ev flowlet.Event, reason string) error {
	ev.Payload = bytes.Clone(ev.Payload)
	c.deadPend = append(c.deadPend, DeadLetter{Payload: ev.Payload, Reason: reason, Event: &ev})
	return nil
}

// DeadLetters returns what committed steps dead-lettered themselves, in order.
func (c *Context) DeadLetters() []DeadLetter { return slices.Clone(c.dead) }

// State implements flowlet.Context.
func (c *Context) State(name string) flowlet.Table {
	t, ok := c.tables[name]
	if !ok {
		t = &table{ctx: c, name: name, committed: map[string][]byte{}, buf: map[string]*[]byte{}}
		c.tables[name] = t
	}
	return t
}

// Counters implements flowlet.Context.
func (c *Context) Counters(name string) flowlet.Counters {
	n, ok := c.counters[name]
	if !ok {
		n = &counters{ctx: c, name: name, committed: map[string]int64{}, buf: map[string]int64{}}
		c.counters[name] = n
	}
	return n
}

// Name implements flowlet.Context.
func (c *Context) Name() string { return c.name }

// Instance implements flowlet.Context.
func (c *Context) Instance() int { return c.instance }

// Instances implements flowlet.Context.
func (c *Context) Instances() int { return c.instances }

// Logger implements flowlet.Context.
func (c *Context) Logger() *slog.Logger { return c.logger }

// Commit ends the current step successfully: its writes and emits take effect.
func (c *Context) Commit() {
	for _, t := range c.tables {
		for k, v := range t.buf {
			if v == nil {
				delete(t.committed, k)
			} else {
				t.committed[k] = *v
			}
		}
		clear(t.buf)
	}
	for _, n := range c.counters {
		for k, d := range n.buf {
			if d != 0 { // as in the runtime: a step's zero sum stores nothing
				n.committed[k] += d
			}
		}
		clear(n.buf)
	}
	c.emitted = append(c.emitted, c.pending...)
	c.pending = nil
	c.dead = append(c.dead, c.deadPend...)
	c.deadPend = nil
	c.callErr = nil
}

// Abort ends the current step as failed: its writes and emits are dropped.
func (c *Context) Abort() {
	for _, t := range c.tables {
		clear(t.buf)
	}
	for _, n := range c.counters {
		clear(n.buf)
	}
	c.pending = nil
	c.deadPend = nil
	c.callErr = nil
}

func (c *Context) end(err error) error {
	if err == nil {
		err = c.callErr // an ignored failed Emit or state call fails the step
	}
	if err != nil {
		c.Abort()
		return err
	}
	c.Commit()
	return nil
}

// Init calls f's Init, if it has one, with config.
func (c *Context) Init(f flowlet.Flowlet, config map[string]any) error {
	in, ok := f.(flowlet.Initializer)
	if !ok {
		return nil
	}
	return in.Init(flowlet.InitContext{
		Name: c.name, Instance: c.instance, Instances: c.instances,
		Config: flowlet.NewConfig(c.name, config), Logger: c.logger,
	})
}

// Process runs one step over evs, as the runtime does: ProcessBatch when f
// has it, else Process for each event. The step commits when f returns nil
// and aborts otherwise. f gets copies of the events' payloads (and keys):
// changing them does not change evs, and once the step has ended they are
// overwritten, as a plugin's are by its next batch, so a flowlet that keeps
// a payload instead of copying it finds out in its tests.
func (c *Context) Process(f flowlet.Flowlet, evs ...flowlet.Event) error {
	b, batch := f.(flowlet.BatchProcessor)
	p, single := f.(flowlet.Processor)
	if !batch && !single {
		return fmt.Errorf("flowlettest: %T implements neither Process nor ProcessBatch", f)
	}
	own, buf := copyEvents(evs)
	defer scribble(buf)
	if batch {
		return c.end(c.call(func(ctx flowlet.Context) error { return b.ProcessBatch(ctx, own) }))
	}
	for _, ev := range own {
		if err := c.call(func(ctx flowlet.Context) error { return p.Process(ctx, ev) }); err != nil {
			return c.end(err)
		}
	}
	return c.end(nil)
}

// copyEvents copies the payloads of evs into one buffer, and their keys.
func copyEvents(evs []flowlet.Event) ([]flowlet.Event, []byte) {
	n := 0
	for _, ev := range evs {
		n += len(ev.Payload)
	}
	buf := make([]byte, 0, n)
	own := make([]flowlet.Event, len(evs))
	for i, ev := range evs {
		start := len(buf)
		buf = append(buf, ev.Payload...)
		if ev.Payload != nil {
			ev.Payload = buf[start:len(buf):len(buf)]
		}
		ev.Keys = slices.Clone(ev.Keys)
		own[i] = ev
	}
	return own, buf
}

// scribble overwrites a step's payloads once it ended.
func scribble(buf []byte) {
	const mark = "[payload kept past its step]"
	for i := range buf {
		buf[i] = mark[i%len(mark)]
	}
}

// Generate runs one step of a Source. ErrIdle and ErrEndOfInput commit.
func (c *Context) Generate(f flowlet.Flowlet) error {
	s, ok := f.(flowlet.Source)
	if !ok {
		return fmt.Errorf("flowlettest: %T does not implement Generate", f)
	}
	err := c.call(s.Generate)
	if isEndOrIdle(err) && c.callErr == nil {
		c.Commit()
		return err
	}
	if isEndOrIdle(err) {
		err = c.callErr
	}
	return c.end(err)
}

func isEndOrIdle(err error) bool {
	return errors.Is(err, flowlet.ErrIdle) || errors.Is(err, flowlet.ErrEndOfInput)
}

// Tick runs one tick step.
func (c *Context) Tick(f flowlet.Flowlet) error {
	t, ok := f.(flowlet.Ticker)
	if !ok {
		return fmt.Errorf("flowlettest: %T does not implement Tick", f)
	}
	return c.end(c.call(t.Tick))
}

// Emitted returns every event emitted by committed steps, in order.
func (c *Context) Emitted() []Emitted { return slices.Clone(c.emitted) }

// Emits returns the payloads emitted on output by committed steps, as strings.
func (c *Context) Emits(output string) []string {
	var out []string
	for _, e := range c.emitted {
		if e.Output == output {
			out = append(out, string(e.Payload))
		}
	}
	return out
}

// Reset forgets the recorded emits (state is kept).
func (c *Context) Reset() { c.emitted = nil }

// Get returns a committed value of a table.
func (c *Context) Get(table, key string) (string, bool) {
	t, ok := c.tables[table]
	if !ok {
		return "", false
	}
	v, ok := t.committed[key]
	return string(v), ok
}

// Count returns a committed counter.
func (c *Context) Count(counters, key string) int64 {
	n, ok := c.counters[counters]
	if !ok {
		return 0
	}
	return n.committed[key]
}

// Table returns a table's committed contents.
func (c *Context) Table(name string) map[string]string {
	out := map[string]string{}
	if t, ok := c.tables[name]; ok {
		for k, v := range t.committed {
			out[k] = string(v)
		}
	}
	return out
}

// CountersMap returns a counter table's committed contents.
func (c *Context) CountersMap(name string) map[string]int64 {
	out := map[string]int64{}
	if n, ok := c.counters[name]; ok {
		for k, v := range n.committed {
			out[k] = v
		}
	}
	return out
}

// Event returns an input event with payload and the given keys and headers,
// and an ID of its own ("test/1", "test/2", …), kept when the same value is
// processed again, as the runtime redelivers an event with its ID. Set the
// Input field for a flowlet with several inputs.
func Event(payload string, opts ...flowlet.EmitOption) flowlet.Event {
	o := flowlet.ResolveEmitOptions(opts)
	id := fmt.Sprintf("test/%d", eventSeq.Add(1))
	return flowlet.Event{ID: id, Payload: []byte(payload), Keys: o.Keys, EventTime: o.EventTime, TraceID: o.TraceID}
}

var eventSeq atomic.Int64

type table struct {
	ctx       *Context
	name      string
	committed map[string][]byte
	buf       map[string]*[]byte // nil: deleted in this step
}

// check refuses what the runtime's state refuses, as a failed call of the
// step (see Context.failed).
func (c *Context) check(kind, name string, key []byte) error {
	if err := nameErr(kind, name); err != nil {
		return c.failed(err)
	}
	if len(key) > flowlet.MaxKeySize {
		return c.failed(fmt.Errorf("flowlettest: %s %q: %w: %d bytes, at most %d", kind, name, flowlet.ErrKeyTooLarge, len(key), flowlet.MaxKeySize))
	}
	return nil
}

// nameErr is the error of every call on a table or counters of a bad name.
func nameErr(kind, name string) error {
	if !flowlet.ValidStateName(name) {
		return fmt.Errorf("flowlettest: %w: %s %q (want [a-z0-9][a-z0-9_-]{0,62})", flowlet.ErrInvalidName, kind, name)
	}
	return nil
}

func (t *table) check(key []byte) error { return t.ctx.check("table", t.name, key) }

func (t *table) Get(key []byte) ([]byte, bool, error) {
	if err := t.check(key); err != nil {
		return nil, false, err
	}
	if v, ok := t.buf[string(key)]; ok {
		if v == nil {
			return nil, false, nil
		}
		return bytes.Clone(*v), true, nil
	}
	v, ok := t.committed[string(key)]
	return bytes.Clone(v), ok, nil
}

func (t *table) Put(key, value []byte) error {
	if err := t.check(key); err != nil {
		return err
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	t.buf[string(key)] = &v
	return nil
}

func (t *table) Delete(key []byte) error {
	if err := t.check(key); err != nil {
		return err
	}
	t.buf[string(key)] = nil
	return nil
}

func (t *table) Scan(o flowlet.ScanOptions) flowlet.Iterator {
	if err := nameErr("table", t.name); err != nil {
		return &iter{ctx: t.ctx, err: err}
	}
	merged := map[string][]byte{}
	for k, v := range t.committed {
		merged[k] = v
	}
	for k, v := range t.buf {
		if v == nil {
			delete(merged, k)
		} else {
			merged[k] = *v
		}
	}
	it := &iter{}
	for k, v := range merged {
		if o.Match([]byte(k)) {
			it.items = append(it.items, item{k, bytes.Clone(v), 0})
		}
	}
	it.sort(o.Limit)
	return it
}

type counters struct {
	ctx       *Context
	name      string
	committed map[string]int64
	buf       map[string]int64
}

func (n *counters) check(key []byte) error { return n.ctx.check("counters", n.name, key) }

func (n *counters) Add(key []byte, d int64) error {
	if err := n.check(key); err != nil {
		return err
	}
	n.buf[string(key)] += d
	return nil
}

func (n *counters) Get(key []byte) (int64, error) {
	if err := n.check(key); err != nil {
		return 0, err
	}
	return n.committed[string(key)] + n.buf[string(key)], nil
}

func (n *counters) Scan(o flowlet.ScanOptions) flowlet.CounterIterator {
	if err := nameErr("counters", n.name); err != nil {
		return &iter{ctx: n.ctx, err: err}
	}
	merged := map[string]int64{}
	for k, v := range n.committed {
		merged[k] += v
	}
	for k, v := range n.buf {
		if v != 0 { // a step's zero sum stores nothing
			merged[k] += v
		}
	}
	it := &iter{}
	for k, v := range merged {
		if o.Match([]byte(k)) {
			it.items = append(it.items, item{k, nil, v})
		}
	}
	it.sort(o.Limit)
	return it
}

type item struct {
	key   string
	value []byte
	count int64
}

type iter struct {
	items []item
	pos   int
	ctx   *Context
	err   error // a failed scan: it fails the step as it ends, as in the runtime
}

func (it *iter) sort(limit int) {
	sort.Slice(it.items, func(i, j int) bool { return it.items[i].key < it.items[j].key })
	if limit > 0 && len(it.items) > limit {
		it.items = it.items[:limit]
	}
}

func (it *iter) Next() bool {
	if it.err != nil {
		it.ctx.failed(it.err)
		return false
	}
	if it.pos >= len(it.items) {
		return false
	}
	it.pos++
	return true
}

// cur is the current entry: empty before the first Next, as in the runtime.
func (it *iter) cur() item {
	if it.pos == 0 {
		return item{}
	}
	return it.items[it.pos-1]
}

func (it *iter) Key() []byte {
	if it.pos == 0 {
		return nil
	}
	return []byte(it.cur().key)
}
func (it *iter) Value() []byte { return it.cur().value }
func (it *iter) Count() int64  { return it.cur().count }
func (it *iter) Err() error    { return it.err }
func (it *iter) Close() error  { return nil }

// call runs fn with a Context of its own (a callCtx) and ends that Context
// when fn returns.
func (c *Context) call(fn func(flowlet.Context) error) error {
	h := &callCtx{c: c}
	defer h.end()
	return fn(h)
}

// callCtx is the flowlet.Context of one Process, ProcessBatch, Generate or
// Tick call, as the runtime's: goroutines of the call may use it (its calls
// are serialized), and once the call returned it answers
// flowlet.ErrStepEnded, as do the tables, counters and iterators it gave
// out, and its context.Context is done; nothing reaches a later step.
type callCtx struct {
	c     *Context
	mu    sync.Mutex
	ended bool
	// done is the call's own context once its Done was asked for,
	// cancelled with flowlet.ErrStepEnded when the call returns (as in
	// the runtime: a goroutine waiting on it ends).
	done   context.Context
	cancel context.CancelCauseFunc
}

var _ flowlet.Context = (*callCtx)(nil)

// lock locks h and reports whether its call is still running; if not, h is
// left unlocked.
func (h *callCtx) lock() bool {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return false
	}
	return true
}

// do runs f locked while the call runs, and answers flowlet.ErrStepEnded
// once it has ended.
func (h *callCtx) do(f func() error) error {
	if !h.lock() {
		return flowlet.ErrStepEnded
	}
	defer h.mu.Unlock()
	return f()
}

func (h *callCtx) end() {
	h.mu.Lock()
	h.ended = true
	if h.cancel != nil {
		h.cancel(flowlet.ErrStepEnded)
	}
	h.mu.Unlock()
}

// endedContext is the context.Context of an ended call: done, with the
// cause flowlet.ErrStepEnded, as in the runtime.
var endedContext = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(flowlet.ErrStepEnded)
	return ctx
}()

func (h *callCtx) ctx() context.Context {
	if !h.lock() {
		return endedContext
	}
	defer h.mu.Unlock()
	if h.done != nil {
		return h.done
	}
	return h.c.Context
}

// Done is closed once the call returned, the channel given during the
// call too.
func (h *callCtx) Done() <-chan struct{} {
	if !h.lock() {
		return endedContext.Done()
	}
	defer h.mu.Unlock()
	if h.done == nil {
		h.done, h.cancel = context.WithCancelCause(h.c.Context)
	}
	return h.done.Done()
}

func (h *callCtx) Deadline() (time.Time, bool) { return h.ctx().Deadline() }
func (h *callCtx) Err() error                  { return h.ctx().Err() }
func (h *callCtx) Value(key any) any           { return h.ctx().Value(key) }
func (h *callCtx) Name() string                { return h.c.Name() }
func (h *callCtx) Instance() int               { return h.c.Instance() }
func (h *callCtx) Instances() int              { return h.c.Instances() }
func (h *callCtx) Logger() *slog.Logger        { return h.c.Logger() }

// Emit implements flowlet.Context.
func (h *callCtx) Emit(output string, payload []byte, opts ...flowlet.EmitOption) error {
	return h.do(func() error { return h.c.Emit(output, payload, opts...) })
}

// DeadLetter is Context.DeadLetter, for the call.
func (h *callCtx) DeadLetter(payload []byte, reason string) error {
	return h.do(func() error { return h.c.DeadLetter(payload, reason) })
}

// DeadLetterEvent is Context.DeadLetterEvent, for the call.
func (h *callCtx) DeadLetterEvent(ev flowlet.Event, reason string) error {
	return h.do(func() error { return h.c.DeadLetterEvent(ev, reason) })
}

// State implements flowlet.Context.
func (h *callCtx) State(name string) flowlet.Table {
	if !h.lock() {
		return callTable{h: h}
	}
	defer h.mu.Unlock()
	return callTable{h, h.c.State(name).(*table)}
}

// Counters implements flowlet.Context.
func (h *callCtx) Counters(name string) flowlet.Counters {
	if !h.lock() {
		return callCounters{h: h}
	}
	defer h.mu.Unlock()
	return callCounters{h, h.c.Counters(name).(*counters)}
}

// callTable is a table as a call sees it.
type callTable struct {
	h *callCtx
	t *table // nil: the call had ended
}

func (v callTable) Get(key []byte) ([]byte, bool, error) {
	if !v.h.lock() {
		return nil, false, flowlet.ErrStepEnded
	}
	defer v.h.mu.Unlock()
	return v.t.Get(key)
}

func (v callTable) Put(key, value []byte) error {
	return v.h.do(func() error { return v.t.Put(key, value) })
}

func (v callTable) Delete(key []byte) error {
	return v.h.do(func() error { return v.t.Delete(key) })
}

func (v callTable) Scan(o flowlet.ScanOptions) flowlet.Iterator {
	if !v.h.lock() {
		return &callIter{h: v.h, it: &iter{}, err: flowlet.ErrStepEnded}
	}
	defer v.h.mu.Unlock()
	return &callIter{h: v.h, it: v.t.Scan(o).(*iter)}
}

// callCounters is a counter table as a call sees it.
type callCounters struct {
	h *callCtx
	n *counters // nil: the call had ended
}

func (v callCounters) Add(key []byte, delta int64) error {
	return v.h.do(func() error { return v.n.Add(key, delta) })
}

func (v callCounters) Get(key []byte) (int64, error) {
	if !v.h.lock() {
		return 0, flowlet.ErrStepEnded
	}
	defer v.h.mu.Unlock()
	return v.n.Get(key)
}

func (v callCounters) Scan(o flowlet.ScanOptions) flowlet.CounterIterator {
	if !v.h.lock() {
		return &callIter{h: v.h, it: &iter{}, err: flowlet.ErrStepEnded}
	}
	defer v.h.mu.Unlock()
	return &callIter{h: v.h, it: v.n.Scan(o).(*iter)}
}

// callIter is an iterator of a call: it ends with ErrStepEnded once the call
// has ended.
type callIter struct {
	h   *callCtx
	it  *iter
	err error
}

func (c *callIter) Next() bool {
	if c.err != nil {
		return false
	}
	if !c.h.lock() {
		c.err = flowlet.ErrStepEnded
		return false
	}
	defer c.h.mu.Unlock()
	return c.it.Next()
}

func (c *callIter) Key() []byte   { return c.it.Key() }
func (c *callIter) Value() []byte { return c.it.Value() }
func (c *callIter) Count() int64  { return c.it.Count() }
func (c *callIter) Close() error  { return c.it.Close() }

func (c *callIter) Err() error {
	if c.err != nil {
		return c.err
	}
	return c.it.Err()
}
