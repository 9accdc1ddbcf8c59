package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/state"
	"github.com/flowrun/flowrun/queue"
)

// DeadLetterer is implemented by the flowlet.Context the runtime hands to a
// step. A flowlet that finds an input it can never handle (a malformed
// line, say) may put it in its dead-letter queue itself, in the step's
// transaction, instead of returning an error and waiting for the retries:
//
//	if dl, ok := ctx.(interface{ DeadLetter([]byte, string) error }); ok {
//		return dl.DeadLetter(line, "bad status")
//	}
//
// The interface is matched structurally, so flowlets need not import this
// package.
type DeadLetterer interface {
	DeadLetter(payload []byte, reason string) error
}

// EventDeadLetterer is implemented by the flowlet.Context the runtime hands
// to a step too. DeadLetterEvent puts an input event of the step in the
// flowlet's dead-letter queue with its input queue, id, keys and headers, in
// the step's transaction, so that `flowrun dlq replay` can feed it to the
// flowlet again; the event counts as consumed when the step commits. Match
// it structurally as well:
//
//	if dl, ok := ctx.(interface {
//		DeadLetterEvent(flowlet.Event, string) error
//	}); ok {
//		return dl.DeadLetterEvent(ev, "bad status")
//	}
type EventDeadLetterer interface {
	DeadLetterEvent(ev flowlet.Event, reason string) error
}

// maxDeadLetterPayload bounds what a DeadLetter call stores of its payload.
const maxDeadLetterPayload = 1 << 20

type pendingEmit struct {
	r  *route
	ev queue.Event
}

type undoRec struct {
	table   *state.Table
	counter *state.Counters
	key     []byte
	old     []byte
	existed bool
	delta   int64
}

// stepCtx is the flowlet.Context of one step. Emits and dead letters are
// buffered and handed to the producers when the step is about to commit, so
// that a failed event can be rolled back alone (savepoints): its emits are
// truncated and its state writes undone, the other events of the batch stay.
type stepCtx struct {
	context.Context
	in *instance

	emits []pendingEmit
	dead  []DeadLetter
	// callErr is the current event's first failed Emit or state call
	// (failed): it fails the event even if the flowlet ignored the error,
	// else the step would commit without the emit or the write.
	callErr error
	wrote   bool // a state write happened
	// writes and writeBytes: the flowlet's state writes in the step (for
	// StepTooLargeError).
	writes     int
	writeBytes int64

	tracking bool // per-event savepoints on: record undo information
	undo     []undoRec
	saved    map[string]struct{}
	event    *flowlet.Event // current input event, for DeadLetter
	tables   map[string]*tableView
	counters map[string]*counterView
	payload  []byte              // scratch for envelopes
	opts     flowlet.EmitOptions // an emit's resolved options, reused (Resolve)

	// mu guards what a flowlet may reach through a Context it kept past
	// its call (from a goroutine of its own): h, the handle of the call
	// in progress or the last one, and open, true only while it runs. Every method
	// of a handle, its tables, counters and iterators takes mu and checks
	// both, so that once the call returned they give flowlet.ErrStepEnded
	// and nothing reaches the next step (the runtime reuses this stepCtx).
	mu   sync.Mutex
	h    *callCtx
	open bool
	// callDone is the context of the call in progress once its Done was
	// asked for (a goroutine may wait on it, or a context derived from
	// it): cancelled with flowlet.ErrStepEnded when the call returns, so
	// that what waits learns the step ended. Made only when asked for.
	callDone   context.Context
	callCancel context.CancelCauseFunc
}

// callCtx is the flowlet.Context of one call of the flowlet (one per call:
// a kept one never becomes valid again, not in a later call of its step
// either), over the step's stepCtx.
type callCtx struct{ c *stepCtx }

var (
	_ flowlet.Context   = (*callCtx)(nil)
	_ DeadLetterer      = (*callCtx)(nil)
	_ EventDeadLetterer = (*callCtx)(nil)
)

// call runs fn, a call of the flowlet, with a handle of its own: valid
// until fn returns. A panic is returned as a PanicError (safeCall).
func (c *stepCtx) call(fn func(flowlet.Context) error) error {
	// Tables and counters are handed out per call: a kept one is of its
	// call's handle. (Only that handle, not given out yet, may use them.)
	clear(c.tables)
	clear(c.counters)
	h := &callCtx{c: c}
	c.mu.Lock()
	c.h, c.open = h, true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.open = false
		cancel := c.callCancel
		c.callDone, c.callCancel = nil, nil
		c.mu.Unlock()
		if cancel != nil {
			cancel(flowlet.ErrStepEnded)
		}
	}()
	return safeCall(func() error { return fn(h) })
}

// lock takes c.mu if h is its step's handle during one of its calls, and
// reports whether it did.
func (h *callCtx) lock() bool {
	c := h.c
	c.mu.Lock()
	if c.h == h && c.open {
		return true
	}
	c.mu.Unlock()
	return false
}

func (h *callCtx) unlock() { h.c.mu.Unlock() }

// endedContext stands for the context.Context of an ended step: done, with
// the cause flowlet.ErrStepEnded (as a plugin's Context).
var endedContext = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(flowlet.ErrStepEnded)
	return ctx
}()

// ctx is the step's context.Context while h is live, endedContext after.
func (h *callCtx) ctx() context.Context {
	if !h.lock() {
		return endedContext
	}
	defer h.unlock()
	if d := h.c.callDone; d != nil {
		return d
	}
	return h.c.Context
}

// Done is the step's Done while h is live, closed once its call returned
// (the channel handed out during the call too: the call's own context).
func (h *callCtx) Done() <-chan struct{} {
	if !h.lock() {
		return endedContext.Done()
	}
	defer h.unlock()
	c := h.c
	if c.callDone == nil {
		c.callDone, c.callCancel = context.WithCancelCause(c.Context)
	}
	return c.callDone.Done()
}

func (h *callCtx) Deadline() (time.Time, bool) { return h.ctx().Deadline() }
func (h *callCtx) Err() error                  { return h.ctx().Err() }
func (h *callCtx) Value(key any) any           { return h.ctx().Value(key) }

// Emit implements flowlet.Context.
func (h *callCtx) Emit(output string, payload []byte, opts ...flowlet.EmitOption) error {
	if !h.lock() {
		return flowlet.ErrStepEnded
	}
	defer h.unlock()
	return h.c.Emit(output, payload, opts...)
}

// DeadLetter implements DeadLetterer.
func (h *callCtx) DeadLetter(payload []byte, reason string) error {
	if !h.lock() {
		return flowlet.ErrStepEnded
	}
	defer h.unlock()
	return h.c.DeadLetter(payload, reason)
}

// DeadLetterEvent implements EventDeadLetterer.
func (h *callCtx) DeadLetterEvent(ev flowlet.Event, reason string) error {
	if !h.lock() {
		return flowlet.ErrStepEnded
	}
	defer h.unlock()
	return h.c.DeadLetterEvent(ev, reason)
}

// State implements flowlet.Context. A table of an ended step gives
// flowlet.ErrStepEnded.
func (h *callCtx) State(name string) flowlet.Table {
	if !h.lock() {
		return endedTable{}
	}
	defer h.unlock()
	return h.c.State(name)
}

// Counters implements flowlet.Context.
func (h *callCtx) Counters(name string) flowlet.Counters {
	if !h.lock() {
		return endedCounters{}
	}
	defer h.unlock()
	return h.c.Counters(name)
}

func (h *callCtx) Name() string         { return h.c.in.fl.Name }
func (h *callCtx) Instance() int        { return h.c.in.idx }
func (h *callCtx) Instances() int       { return int(h.c.in.frt.n.Load()) }
func (h *callCtx) Logger() *slog.Logger { return h.c.in.logger }

type mark struct {
	emits, dead, undo, writes int
	writeBytes                int64
}

func (c *stepCtx) reset(ctx context.Context) {
	c.mu.Lock()
	c.Context = ctx
	c.h, c.open = nil, false
	c.mu.Unlock()
	clear(c.emits)
	c.emits = c.emits[:0]
	c.dead = c.dead[:0]
	c.callErr = nil
	c.wrote = false
	c.writes, c.writeBytes = 0, 0
	c.tracking = false
	c.undo = c.undo[:0]
	clear(c.saved)
	c.event = nil
}

func (c *stepCtx) empty() bool { return len(c.emits) == 0 && len(c.dead) == 0 && !c.wrote }

// begin starts a savepoint for one event.
func (c *stepCtx) begin(ev *flowlet.Event) mark {
	c.tracking = true
	c.event = ev
	c.callErr = nil
	clear(c.saved)
	return mark{len(c.emits), len(c.dead), len(c.undo), c.writes, c.writeBytes}
}

// rollback undoes everything since m.
func (c *stepCtx) rollback(m mark) {
	for i := len(c.undo) - 1; i >= m.undo; i-- {
		u := &c.undo[i]
		switch {
		case u.counter != nil:
			_ = u.counter.Add(u.key, -u.delta)
		case u.existed:
			_ = u.table.Put(u.key, u.old)
		default:
			_ = u.table.Delete(u.key)
		}
		c.undo[i] = undoRec{}
	}
	c.undo = c.undo[:m.undo]
	clear(c.emits[m.emits:])
	c.emits = c.emits[:m.emits]
	c.dead = c.dead[:m.dead]
	c.writes, c.writeBytes = m.writes, m.writeBytes
	clear(c.saved)
}

// wrote1 counts one state write of n bytes.
func (c *stepCtx) wrote1(n int) {
	c.wrote = true
	c.writes++
	c.writeBytes += int64(n)
}

// Emit implements flowlet.Context.
func (c *stepCtx) Emit(output string, payload []byte, opts ...flowlet.EmitOption) error {
	return c.failed(c.emit(output, payload, opts))
}

// failed records err, if any, as the current event's callErr and returns it.
func (c *stepCtx) failed(err error) error {
	if err != nil && c.callErr == nil {
		c.callErr = err
	}
	return err
}

func (c *stepCtx) emit(output string, payload []byte, opts []flowlet.EmitOption) error {
	in := c.in
	if d := in.typ.Info.Outputs; len(d) > 0 && !slices.Contains(d, output) {
		return fmt.Errorf("flowlet %q: emit on undeclared output %q (declared: %v)", in.fl.Name, output, d)
	}
	r := in.outs[output]
	if r == nil {
		// An output without a connection has no consumer (specs/app-yaml.md).
		in.st.unrouted.Add(1)
		return nil
	}
	o := &c.opts
	o.Resolve(opts)
	var key []byte
	if r.key != "" {
		v, ok := o.Key(r.key)
		if !ok {
			return fmt.Errorf("flowlet %q: emit on %q without partition key %q: queue %s is hash-partitioned by it, so every event needs flowlet.Key(%q, value)",
				in.fl.Name, output, r.key, r.queue, r.key)
		}
		key = []byte(v)
	}
	env := appendEnvelope(make([]byte, 0, len(payload)+1), o.Keys, r.key, payload)
	ev := queue.Event{Payload: env, Key: key, Priority: o.Priority, EventTime: o.EventTime, TraceID: o.TraceID}
	if n := ev.Size(); n > r.maxBytes {
		return fmt.Errorf("flowlet %q: emit on %q: event of %d bytes exceeds the queue's limit of %d bytes: %w",
			in.fl.Name, output, n, r.maxBytes, queue.ErrEventTooLarge)
	}
	c.emits = append(c.emits, pendingEmit{r: r, ev: ev})
	return nil
}

// DeadLetter implements DeadLetterer: payload goes to the flowlet's
// dead-letter queue with reason, when the step commits.
func (c *stepCtx) DeadLetter(payload []byte, reason string) error {
	if len(payload) > maxDeadLetterPayload {
		reason = fmt.Sprintf("%s (payload of %d bytes truncated to %d)", reason, len(payload), maxDeadLetterPayload)
		payload = payload[:maxDeadLetterPayload]
	}
	d := DeadLetter{Flowlet: c.in.fl.Name, Error: reason, Attempts: 1, Time: time.Now(), Payload: slices.Clone(payload)}
	if ev := c.event; ev != nil {
		d.Input, d.EventID, d.Keys, d.EventTime, d.TraceID = ev.Input, ev.ID, slices.Clone(ev.Keys), ev.EventTime, ev.TraceID
	}
	c.dead = append(c.dead, d)
	return nil
}

// DeadLetterEvent implements EventDeadLetterer.
func (c *stepCtx) DeadLetterEvent(ev flowlet.Event, reason string) error {
	payload := ev.Payload
	if len(payload) > maxDeadLetterPayload {
		reason = fmt.Sprintf("%s (payload of %d bytes truncated to %d)", reason, len(payload), maxDeadLetterPayload)
		payload = payload[:maxDeadLetterPayload]
	}
	c.dead = append(c.dead, DeadLetter{Flowlet: c.in.fl.Name, Error: reason, Attempts: 1, Time: time.Now(),
		Input: ev.Input, EventID: ev.ID, Keys: slices.Clone(ev.Keys), EventTime: ev.EventTime, TraceID: ev.TraceID,
		Payload: slices.Clone(payload)})
	return nil
}

// State implements flowlet.Context.
func (c *stepCtx) State(name string) flowlet.Table {
	if v := c.tables[name]; v != nil {
		return v
	}
	v := &tableView{c: c, h: c.h, t: c.in.store.Table(name), name: name}
	c.tables[name] = v
	return v
}

// Counters implements flowlet.Context.
func (c *stepCtx) Counters(name string) flowlet.Counters {
	if v := c.counters[name]; v != nil {
		return v
	}
	v := &counterView{c: c, h: c.h, t: c.in.store.Counters(name)}
	c.counters[name] = v
	return v
}

func (c *stepCtx) Name() string         { return c.in.fl.Name }
func (c *stepCtx) Instance() int        { return c.in.idx }
func (c *stepCtx) Instances() int       { return int(c.in.frt.n.Load()) }
func (c *stepCtx) Logger() *slog.Logger { return c.in.logger }

// tableView is a table as a step's calls see it (h: that step's handle).
type tableView struct {
	c    *stepCtx
	h    *callCtx
	t    *state.Table
	name string
}

func (v *tableView) save(key []byte) error {
	c := v.c
	if !c.tracking {
		return nil
	}
	id := v.name + "\x00" + string(key)
	if _, ok := c.saved[id]; ok {
		return nil
	}
	old, ok, err := v.t.Get(key)
	if err != nil {
		return err
	}
	c.saved[id] = struct{}{}
	c.undo = append(c.undo, undoRec{table: v.t, key: slices.Clone(key), old: slices.Clone(old), existed: ok})
	return nil
}

func (v *tableView) Get(key []byte) ([]byte, bool, error) {
	if !v.h.lock() {
		return nil, false, flowlet.ErrStepEnded
	}
	defer v.h.unlock()
	val, ok, err := v.t.Get(key)
	return val, ok, v.c.failed(err)
}

func (v *tableView) Put(key, value []byte) error {
	if !v.h.lock() {
		return flowlet.ErrStepEnded
	}
	defer v.h.unlock()
	if err := v.save(key); err != nil {
		return v.c.failed(err)
	}
	if err := v.t.Put(key, value); err != nil {
		return v.c.failed(err)
	}
	v.c.wrote1(len(key) + len(value))
	return nil
}

func (v *tableView) Delete(key []byte) error {
	if !v.h.lock() {
		return flowlet.ErrStepEnded
	}
	defer v.h.unlock()
	if err := v.save(key); err != nil {
		return v.c.failed(err)
	}
	if err := v.t.Delete(key); err != nil {
		return v.c.failed(err)
	}
	v.c.wrote1(len(key))
	return nil
}

func (v *tableView) Scan(opts flowlet.ScanOptions) flowlet.Iterator {
	if !v.h.lock() {
		return endedIter{}
	}
	defer v.h.unlock()
	return &stepIter{h: v.h, it: v.t.Scan(opts)}
}

type counterView struct {
	c *stepCtx
	h *callCtx
	t *state.Counters
}

func (v *counterView) Add(key []byte, delta int64) error {
	if !v.h.lock() {
		return flowlet.ErrStepEnded
	}
	defer v.h.unlock()
	if err := v.t.Add(key, delta); err != nil {
		return v.c.failed(err)
	}
	v.c.wrote1(len(key) + 8)
	if v.c.tracking {
		v.c.undo = append(v.c.undo, undoRec{counter: v.t, key: slices.Clone(key), delta: delta})
	}
	return nil
}

func (v *counterView) Get(key []byte) (int64, error) {
	if !v.h.lock() {
		return 0, flowlet.ErrStepEnded
	}
	defer v.h.unlock()
	n, err := v.t.Get(key)
	return n, v.c.failed(err)
}

func (v *counterView) Scan(opts flowlet.ScanOptions) flowlet.CounterIterator {
	if !v.h.lock() {
		return endedIter{}
	}
	defer v.h.unlock()
	return &stepCounterIter{stepIter{h: v.h, cit: v.t.Scan(opts)}}
}

// stepIter is a table's (it) or counters' (cit) iterator of a step: once
// the step's call returned, Next is false and Err flowlet.ErrStepEnded (the
// store ends the step's iterators with it, Close included). Key, Value and
// Count read the iterator's own copies.
type stepIter struct {
	h   *callCtx
	it  flowlet.Iterator
	cit flowlet.CounterIterator
}

type stepCounterIter struct{ stepIter }

// Next records the scan's error, if it ended on one, as a failed call:
// the flowlet may not look at Err.
func (i *stepIter) Next() bool {
	if !i.h.lock() {
		return false
	}
	defer i.h.unlock()
	var it interface {
		Next() bool
		Err() error
	} = i.it
	if i.cit != nil {
		it = i.cit
	}
	if it.Next() {
		return true
	}
	i.h.c.failed(it.Err())
	return false
}

func (i *stepIter) Key() []byte {
	if i.cit != nil {
		return i.cit.Key()
	}
	return i.it.Key()
}

func (i *stepIter) Value() []byte { return i.it.Value() }

func (i *stepCounterIter) Count() int64 { return i.cit.Count() }

func (i *stepIter) Err() error {
	if !i.h.lock() {
		return flowlet.ErrStepEnded
	}
	defer i.h.unlock()
	if i.cit != nil {
		return i.cit.Err()
	}
	return i.it.Err()
}

func (i *stepIter) Close() error {
	if !i.h.lock() {
		return nil // the store ended it with the step
	}
	defer i.h.unlock()
	if i.cit != nil {
		return i.cit.Close()
	}
	return i.it.Close()
}

// endedTable, endedCounters and endedIter are what an ended step's Context
// gives out: every call fails with flowlet.ErrStepEnded.
type (
	endedTable    struct{}
	endedCounters struct{}
	endedIter     struct{}
)

func (endedTable) Get([]byte) ([]byte, bool, error)                    { return nil, false, flowlet.ErrStepEnded }
func (endedTable) Put(_, _ []byte) error                               { return flowlet.ErrStepEnded }
func (endedTable) Delete([]byte) error                                 { return flowlet.ErrStepEnded }
func (endedTable) Scan(flowlet.ScanOptions) flowlet.Iterator           { return endedIter{} }
func (endedCounters) Add([]byte, int64) error                          { return flowlet.ErrStepEnded }
func (endedCounters) Get([]byte) (int64, error)                        { return 0, flowlet.ErrStepEnded }
func (endedCounters) Scan(flowlet.ScanOptions) flowlet.CounterIterator { return endedIter{} }
func (endedIter) Next() bool                                           { return false }
func (endedIter) Key() []byte                                          { return nil }
func (endedIter) Value() []byte                                        { return nil }
func (endedIter) Count() int64                                         { return 0 }
func (endedIter) Err() error                                           { return flowlet.ErrStepEnded }
func (endedIter) Close() error                                         { return nil }
