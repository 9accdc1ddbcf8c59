package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/state"
	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// StepObserver is implemented by flowlets that hold data outside the
// transaction until it commits (the HTTP source's pending requests, the
// stdout sink's lines): Committed runs after each commit of one of the
// instance's steps, Aborted after each abort.
type StepObserver interface {
	Committed()
	Aborted()
}

// OutcomeObserver is a StepObserver that must not take "not known" for
// "not committed": a commit that failed with tx.ErrLogFailed may have
// landed before the log failed (the app stops then). OutcomeUnknown runs
// instead of Aborted for such a step.
type OutcomeObserver interface {
	OutcomeUnknown(err error)
}

// Publisher is implemented by sinks that publish committed output outside
// the store (the file sink). Publish runs in a transaction of its own before
// the instance's first step, after every commit of a step that consumed input,
// and before Close — but not at a stop on a nearly full disk (ErrDiskSpace),
// so what it has to publish must stay in the store for the next start's
// first Publish.
type Publisher interface {
	Publish(ctx flowlet.Context) error
}

// BatchBorrower is implemented by batch flowlets (flowlet.BatchProcessor)
// that keep no reference to the slice ProcessBatch receives after the call
// returned (copies of its Events are fine). ProcessBatch's contract lets a
// flowlet keep the slice (only payloads are call-scoped), so by default
// every step hands it a new one; a BatchBorrower gets the same slice,
// overwritten, step after step. Matched structurally: flowlets need not
// import this package.
type BatchBorrower interface {
	BorrowsBatch()
}

// Waker is implemented by sources that know when input arrives (the HTTP
// source): after ErrIdle the runtime steps it again as soon as Ready
// fires, and after Options.IdleWait at the latest (a wake-up the source
// missed costs at most that).
type Waker interface {
	Ready() <-chan struct{}
}

// Poller is implemented by sources that must poll something outside (a
// followed file): after ErrIdle the runtime asks Changed every
// Options.IdleWait and runs the next step only when it reports true, so an
// idle source costs what Changed costs (a stat) rather than a transaction.
// Changed is called on the instance's goroutine, between steps; a false
// positive costs one idle step, a false negative delays input until it
// changes again, so it must not have any.
type Poller interface {
	Changed() bool
}

// StepSplitter is implemented by sources whose step takes its input in
// units that a step can take fewer of (the built-in sources: http_source's
// whole requests, the lines or events of the others).
// When a Generate step's commit fails for its size (too large for one
// atomic write) or its time (past step_timeout), the runtime calls, after
// Aborted, SplitStep: a source whose step held more than one unit takes
// about half as many in its next Generate (and goes back to full steps by
// itself) and returns true; the step is redone at once, not counted as a
// failure. A step of one unit returns false: that is a failed attempt of
// the unit, retried with backoff (a too-large one is not: it would write
// the same again), and after the retries the runtime calls DropStep with
// the error (flowlet.IsPermanent for a too-large one) instead of stopping
// the source: the source gives the unit up (the HTTP source answers its
// request with the error, the others dead-letter the record — but
// file_source and generator stop on a too-slow one, not the record's
// fault, which a restart reads again) and goes on.
type StepSplitter interface {
	SplitStep() bool
	DropStep(err error)
}

// StopDrainer is implemented by a source holding records it took from
// outside and cannot take again (stdin_source's lines read ahead of its
// steps). When the app stops (Run's context cancelled: a signal, not Scale
// removing the instance), the runtime calls StopTaking, which returns once
// the source takes nothing more from outside; then it runs the source's
// steps, on a context not cancelled (each bounded by Options.StepTimeout),
// without waiting for back-pressure or a pause, until a step emits nothing
// (ErrIdle or ErrEndOfInput) or fails (no retries: the app is stopping;
// a StepSplitter's unit too slow alone is dropped at once, DropStep), so
// that a graceful stop commits what the source took. Run returns after.
type StopDrainer interface {
	StopTaking()
}

// route is one output of one instance: a producer on the output's queue.
type route struct {
	queue    string
	key      string // the queue's partition key name, "" if none
	maxBytes int
	p        queue.Producer
	n        int // events enqueued in the current step
}

// input is one queue an instance consumes.
//
// Wake-ups come from the queue (queue.Notifier): a producer's commit, any
// producer's, the app's flowlets, Ingest and dead-letter replay alike, a
// rescale, partitions released with entries left in them. ready is the
// Ready channel of the last dequeue that found the input empty, as of
// before that step's transaction: while it is open nothing was committed to
// the queue since that transaction's snapshot, so the driver neither
// dequeues from the input nor wakes up for it. nil means look (never
// looked, or the last dequeue returned entries, or failed).
//
// With a queue.GenNotifier (badgerq) a step takes only the notify
// generation before its transaction (an atomic load) and the channel
// (ReadyAt, a lock) only when its dequeue came back empty: a busy input
// costs no lock and no channel per step.
type input struct {
	n      queue.Notifier
	gn     queue.GenNotifier // n, when it counts its wake-ups
	gen    uint64            // gn's generation before the current step's transaction
	ready  <-chan struct{}
	next   <-chan struct{} // without gn: Ready taken before the current step's transaction
	queue  string
	key    string // the queue's partition key name
	c      queue.Consumer
	replay bool // entries are dead-letter records
	taken  int  // entries dequeued in the current step
	// entries is reused by every dequeue (the entries are turned into
	// events at once) when the consumer is a queue.DequeueAppender.
	entries []queue.Entry
}

// instance is one running copy of a flowlet: its own store, consumers,
// producers and transaction context; one goroutine drives it.
type instance struct {
	a      *App
	frt    *flowletRT
	fl     *planner.Flowlet
	typ    flowlet.Type
	st     *flowletStats
	idx    int
	logger *slog.Logger

	f      flowlet.Flowlet
	proc   flowlet.Processor
	batch  flowlet.BatchProcessor
	src    flowlet.Source
	ticker flowlet.Ticker
	pub    Publisher
	obs    StepObserver

	store  *state.Store
	inputs []*input
	outs   map[string]*route
	dlq    *route
	txc    *tx.Context
	final  chan chan struct{} // drain: run one last tick, then close the channel

	// stop is closed when Scale removes the instance: it finishes its
	// in-flight step and returns. done is closed when its driver returned.
	stop    chan struct{}
	done    chan struct{}
	started atomic.Bool
	// active: the instance counts in flowletRT.busy (activate).
	active bool

	sc  *stepCtx
	evs []inEvent // the step's input events, reused from step to step
	// borrow: the flowlet is a BatchBorrower; batchBuf is then the slice
	// ProcessBatch gets, reused (cleared after each call).
	borrow   bool
	batchBuf []flowlet.Event
	next     int // round-robin start over inputs
	closed   bool
	// flowletClosed: the flowlet's Close ran (closeFlowlet).
	flowletClosed bool

	// limit: the batch size while reduced after a too-large step (0: the
	// flowlet's batch_size); limitOK: commits since it was last reduced.
	limit, limitOK int

	pending []tx.Pending // deferred commits not known durable yet, oldest first (deferred.go)
}

// afterInit, set by tests only, runs in newInstance after the flowlet's
// Init: an error fails the instance there.
var afterInit func(*instance) error

func (a *App) newInstance(frt *flowletRT, idx int) (_ *instance, err error) {
	f := frt.fl
	in := &instance{
		a: a, frt: frt, fl: f, typ: frt.typ, st: frt.st, idx: idx,
		logger: a.log.With("flowlet", f.Name, "instance", idx),
		outs:   map[string]*route{},
		final:  make(chan chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	in.f = frt.typ.New()
	if err := flowlet.Check(in.f, frt.typ.Info); err != nil {
		return nil, fmt.Errorf("flowlet %q (%s): %w", f.Name, typeName(f), err)
	}
	in.proc, _ = in.f.(flowlet.Processor)
	in.batch, _ = in.f.(flowlet.BatchProcessor)
	in.src, _ = in.f.(flowlet.Source)
	in.ticker, _ = in.f.(flowlet.Ticker)
	in.pub, _ = in.f.(Publisher)
	in.obs, _ = in.f.(StepObserver)
	_, in.borrow = in.f.(BatchBorrower)
	if f.Tick <= 0 {
		in.ticker = nil
	}
	if len(f.Inputs) > 0 && in.proc == nil && in.batch == nil {
		return nil, fmt.Errorf("flowlet %q (%s) has inputs but implements neither Process nor ProcessBatch", f.Name, typeName(f))
	}
	if init, ok := in.f.(flowlet.Initializer); ok {
		ic := flowlet.InitContext{Name: f.Name, Instance: idx, Instances: int(frt.n.Load()),
			Config: flowlet.NewConfig(f.Name, frt.cfg), Logger: in.logger}
		if err := safeCall(func() error { return init.Init(ic) }); err != nil {
			return nil, fmt.Errorf("flowlet %q instance %d: init: %w", f.Name, idx, err)
		}
	}
	// From here on a failure (internal only) closes what Init opened (an
	// http_source's listener, a file_sink's lock) and the state store.
	defer func() {
		if err != nil {
			if cerr := in.close(); cerr != nil {
				in.logger.Warn("closing the flowlet of an instance that failed to start", "err", cerr)
			}
		}
	}()
	if h := afterInit; h != nil {
		if err = h(in); err != nil {
			return nil, err
		}
	}
	if in.store, err = state.Open(a.st.db, a.plan.App, f.Name); err != nil {
		return nil, err
	}
	qs := a.st.queues
	var parts []tx.Participant
	for _, qn := range f.Inputs {
		c, err := qs.Consumer(qn, f.Name, idx)
		if err != nil {
			return nil, fmt.Errorf("flowlet %q: consumer of %s: %w", f.Name, qn, err)
		}
		inp, err := newInput(qn, a.plan.Queue(qn).Key, c)
		if err != nil {
			return nil, fmt.Errorf("flowlet %q: %w", f.Name, err)
		}
		in.inputs = append(in.inputs, inp)
		parts = append(parts, c)
	}
	if len(f.Inputs) > 0 {
		rq := ReplayName(f.Name)
		c, err := qs.Consumer(rq, f.Name, idx)
		if err != nil {
			return nil, fmt.Errorf("flowlet %q: consumer of %s: %w", f.Name, rq, err)
		}
		inp, err := newInput(rq, "", c)
		if err != nil {
			return nil, fmt.Errorf("flowlet %q: %w", f.Name, err)
		}
		inp.replay = true
		in.inputs = append(in.inputs, inp)
		parts = append(parts, c)
	}
	newRoute := func(qn, key string, max int) (*route, error) {
		p, err := qs.Producer(qn)
		if err != nil {
			return nil, fmt.Errorf("flowlet %q: producer of %s: %w", f.Name, qn, err)
		}
		parts = append(parts, p)
		return &route{queue: qn, key: key, maxBytes: max, p: p}, nil
	}
	for _, o := range f.Outputs {
		qn := planner.QueueName(f.Name, o)
		r, err := newRoute(qn, a.plan.Queue(qn).Key, eventMaxBytes)
		if err != nil {
			return nil, err
		}
		in.outs[o] = r
	}
	if in.dlq, err = newRoute(DLQName(f.Name), "", dlqMaxEventBytes); err != nil {
		return nil, err
	}
	parts = append(parts, in.store)
	// Every participant must stage into the store's DB (the single-store
	// fast path): the store's queues and state told the coordinator at
	// open that they never hold data of invalid transactions, which a
	// participant persisting before its commit (the general path) would
	// make untrue — its writes could turn visible once the transaction's
	// pointer was pruned from the invalid list.
	for _, p := range parts {
		s, ok := p.(tx.Stager)
		if !ok || s.Store() != any(a.st.db) {
			return nil, fmt.Errorf("flowlet %q: participant %T does not stage into the app's store (internal error: every step takes the single-store fast path)", f.Name, p)
		}
	}
	in.txc = a.st.coord.NewContext(parts...)
	in.sc = &stepCtx{in: in, saved: map[string]struct{}{}, tables: map[string]*tableView{}, counters: map[string]*counterView{}}
	return in, nil
}

func (in *instance) close() error {
	if in.closed {
		return nil
	}
	in.closed = true
	err := in.closeFlowlet()
	if in.store != nil {
		in.store.Close()
	}
	return err
}

// closeFlowlet runs the flowlet's Close, once: when the instance closes, or
// earlier, when a source stops while the app runs on (an http_source then
// answers the requests waiting for it instead of leaving them to time out).
func (in *instance) closeFlowlet() error {
	if in.flowletClosed {
		return nil
	}
	in.flowletClosed = true
	c, ok := in.f.(flowlet.Closer)
	if !ok {
		return nil
	}
	if err := safeCall(c.Close); err != nil {
		return fmt.Errorf("flowlet %q instance %d: close: %w", in.fl.Name, in.idx, err)
	}
	return nil
}

// safeCall runs fn and turns a panic into an error with the stack.
func safeCall(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: string(debug.Stack())}
		}
	}()
	return fn()
}

// PanicError is a panic in flowlet code, recovered by the runtime.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// fatalErr reports whether err means the store can no longer be trusted or
// is closed: the app must stop.
func fatalErr(err error) bool {
	return errors.Is(err, tx.ErrLogFailed) || errors.Is(err, tx.ErrClosed) || errors.Is(err, queue.ErrClosed)
}

// withSettleErr is an instance's end error with its final settle's: a
// durability failure shows beside the instance's own error (or its last
// publish's), not dropped for it.
func withSettleErr(err, serr error) error {
	switch {
	case serr == nil:
		return err
	case err == nil:
		return serr
	}
	return errors.Join(err, serr)
}

// run drives the instance until ctx is done (or the source ended).
func (in *instance) run(ctx context.Context) (err error) {
	in.activate()                // startLocked did, before the goroutine
	defer in.deactivate()        // last: after the final settle and publish
	defer in.a.unsettled.Add(-1) // if it never settled
	defer func() {
		// Whatever ended the instance, its commits are durable before it
		// counts as stopped.
		err = withSettleErr(err, in.settle())
	}()
	if in.pub != nil {
		if err := in.publish(ctx); err != nil {
			return err
		}
		defer func() {
			// A last publish so that committed output is out before exit:
			// a step (busy), also after a paused instance stopped. Its
			// failure is the run's, as a step's publish failure is: the
			// output waits in the store, not out.
			in.activate()
			if perr := in.publish(context.WithoutCancel(ctx)); err == nil {
				err = perr
			}
		}()
	}
	in.a.unsettled.Add(-1) // started
	defer in.a.unsettled.Add(1)
	in.started.Store(true)
	if in.src != nil {
		return in.runSource(ctx)
	}
	return in.runConsumer(ctx)
}

func (in *instance) runConsumer(ctx context.Context) error {
	var tickC <-chan time.Time
	var timer *time.Timer
	if in.ticker != nil {
		timer = time.NewTimer(in.fl.Tick)
		defer timer.Stop()
		tickC = timer.C
	}
	for ctx.Err() == nil && !in.stopping() {
		if ok, err := in.waitUnpaused(ctx); !ok {
			return err
		}
		n, err := in.consumeStep(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if err := in.settle(); err != nil { // nothing to do: sync now
			return err
		}
		in.deactivate()
		switch w, done := in.idle(ctx, tickC); w {
		case wakeTick:
			// A tick is a step: not while paused.
			if ok, err := in.waitUnpaused(ctx); !ok {
				return err
			}
			if err := in.tick(ctx); err != nil {
				return err
			}
			timer.Reset(in.fl.Tick)
		case wakeFinal:
			if err := in.finalTick(ctx, done); err != nil {
				return err
			}
		}
	}
	return nil
}

func (in *instance) runSource(ctx context.Context) error {
	a := in.a
	var ready <-chan struct{}
	if w, ok := in.f.(Waker); ok {
		ready = w.Ready()
	}
	poller, _ := in.f.(Poller)
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	for ctx.Err() == nil && !in.stopping() {
		if ok, err := in.waitUnpaused(ctx); err != nil {
			return err
		} else if !ok {
			break
		}
		if waited, ok := in.waitBacklog(ctx); !ok {
			break
		} else if waited {
			continue // paused meanwhile? (waitUnpaused)
		}
		res, err := in.sourceStep(ctx, false)
		if err == nil && res != srcMore {
			err = in.settle() // idle or done: sync now
		}
		switch {
		case err != nil && fatalErr(err):
			return err
		case err != nil:
			// Gave up after the retries: the source stops, the app goes on.
			in.logger.Error("source stopped after retries", "err", err)
			in.st.setErr(err)
			serr := fmt.Errorf("source %q instance %d stopped: %w", in.fl.Name, in.idx, err)
			a.sourceErr.CompareAndSwap(nil, &serr)
			in.sourceStopped()
			return nil
		case res == srcEnd:
			in.logger.Info("source reached end of input")
			in.sourceStopped()
			return nil
		case res == srcIdle:
			in.deactivate()
			for waiting := true; waiting; {
				idle.Reset(a.opts.IdleWait)
				select {
				case <-ctx.Done():
					waiting = false
				case <-in.stop:
					waiting = false
				case <-ready:
					waiting = false
				case <-idle.C:
					waiting = poller != nil && !poller.Changed()
				}
				idle.Stop()
			}
		}
	}
	return in.drainAtStop(ctx)
}

// drainAtStop commits, when the app stops, what a StopDrainer took from
// outside (see StopDrainer). A step that fails ends it: the rest is lost,
// as it was before StopDrainer, and logged.
func (in *instance) drainAtStop(ctx context.Context) error {
	d, ok := in.f.(StopDrainer)
	if !ok || ctx.Err() == nil || in.stopping() {
		return nil
	}
	if err := safeCall(func() error { d.StopTaking(); return nil }); err != nil {
		in.logger.Error("stopping: the source's StopTaking failed; what it took is lost", "err", err)
		return nil
	}
	in.activate()
	notCancelled := context.WithoutCancel(ctx)
	for {
		if !in.a.diskRoomAtStop() {
			in.logger.Error("stopping on a nearly full disk: the source's last steps do not run, for want of room; what it took and did not commit is lost",
				"need_free_mib", stopDrainFree>>20)
			return nil
		}
		bounded, cancel := context.WithTimeout(notCancelled, in.a.opts.StepTimeout)
		res, err := in.sourceStep(bounded, true)
		cancel()
		if err != nil && fatalErr(err) {
			return err
		}
		if err != nil {
			in.logger.Error("stopping: a last step of the source failed; what it took and did not commit is lost", "err", err)
			in.st.setErr(err)
			return nil
		}
		if res != srcMore { // it holds nothing more
			return nil
		}
	}
}

// sourceStopped counts a source instance that ended or gave up, and closes
// its flowlet now rather than when the app closes: what it holds for its
// next steps (an http_source's waiting requests, its listener) is released
// while the rest of the app runs on.
func (in *instance) sourceStopped() {
	in.st.done.Add(1) // first: App.Ingest tells a closed source by it
	in.a.sourcesLeft.Add(-1)
	if err := in.closeFlowlet(); err != nil {
		in.logger.Warn("closing the stopped source", "err", err)
	}
}

type srcResult int

const (
	srcMore srcResult = iota
	srcIdle
	srcEnd
)

// backoff is the wait before retry number n (1-based).
func (in *instance) backoff(n int) time.Duration {
	d := in.fl.Retry.Backoff
	for i := 1; i < n && d < in.fl.Retry.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, in.fl.Retry.MaxBackoff)
}

// retryWait waits before a retry; the app does not count as drained while
// any instance waits to retry. Scale stopping the instance ends the wait.
func (in *instance) retryWait(ctx context.Context, d time.Duration) {
	in.a.unsettled.Add(1)
	defer in.a.unsettled.Add(-1)
	if d <= 0 {
		return
	}
	in.settleBeforeWait()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-in.stop:
	case <-t.C:
	}
}

// retryAfter waits out the backoff before retry number tries of a source's
// step, a tick or a publish, and reports whether to retry: not once the app
// stops or Scale removed the instance. The wait ends at once then, and the
// retries ran back to back, each failing again, until they ran out and the
// source stopped on the error, or the tick was dead-lettered, as if its
// retries had been tried. The step is left undone (nothing of it
// committed): a restart, or the instance that takes over, redoes it; a
// stdin_source's last steps (drainAtStop) take its lines once more.
func (in *instance) retryAfter(ctx context.Context, tries int) bool {
	in.retryWait(ctx, in.backoff(tries))
	return ctx.Err() == nil && !in.stopping()
}

// stopping reports whether Scale removed the instance.
func (in *instance) stopping() bool {
	select {
	case <-in.stop:
		return true
	default:
		return false
	}
}

// waitUnpaused returns ok at once unless the flowlet is paused; then it
// waits for Resume, parked (not busy, its commits durable), answering
// drain's request for a last tick meanwhile. It returns !ok when the app
// stops or Scale removed the instance meanwhile, or (with the error) when
// that last tick failed. Every step starts after it returned ok (or, the
// last tick, after finalTick's activate).
func (in *instance) waitUnpaused(ctx context.Context) (ok bool, err error) {
	frt := in.frt
	for {
		in.activate() // before looking at paused
		if !frt.paused.Load() {
			break
		}
		ch := frt.resume.wait()
		if !frt.paused.Load() {
			continue
		}
		in.settleBeforeWait()
		in.deactivate()
		select {
		case <-ctx.Done():
			return false, nil
		case <-in.stop:
			return false, nil
		case done := <-in.final:
			if err := in.finalTick(ctx, done); err != nil {
				return false, err
			}
		case <-ch:
		}
	}
	return ctx.Err() == nil && !in.stopping(), nil
}

// finalTick runs drain's last tick (paused or not) and closes done.
func (in *instance) finalTick(ctx context.Context, done chan struct{}) error {
	in.activate()
	if in.ticker != nil {
		if err := in.tick(ctx); err != nil {
			return err
		}
	}
	close(done)
	return nil
}

// activate counts the instance in its flowlet's busy instances: it may run
// a step. It comes before the instance looks at paused (waitUnpaused), and
// Pause sets paused before anyone reads busy (WaitPaused, Status), so
// either the reader sees the instance busy or the instance sees the pause:
// busy 0 while paused means no step runs until Resume.
func (in *instance) activate() {
	if !in.active {
		in.active = true
		in.frt.busy.Add(1)
	}
}

// deactivate: the instance waits (for input, a resume, back-pressure) or
// has stopped; it activates again before its next step.
func (in *instance) deactivate() {
	if in.active {
		in.active = false
		if in.frt.busy.Add(-1) == 0 && in.frt.paused.Load() {
			in.frt.parked.notify()
		}
	}
}

// start begins a step's transaction and resets the step context.
func (in *instance) start(ctx context.Context) (*stepCtx, error) {
	if _, err := in.txc.Start(in.a.opts.StepTimeout); err != nil {
		return nil, err
	}
	in.sc.reset(ctx)
	return in.sc, nil
}

// finish hands the buffered emits and dead letters to the producers and
// commits. It reports a conflict as retry=true.
func (in *instance) finish(sc *stepCtx) (retry bool, err error) {
	for i := range sc.emits {
		e := &sc.emits[i]
		if err := e.r.p.Enqueue(sc, e.ev); err != nil {
			in.rollback()
			return false, fmt.Errorf("enqueue on %s: %w", e.r.queue, err)
		}
		e.r.n++
	}
	for i := range sc.dead {
		d := &sc.dead[i]
		if err := in.dlq.p.Enqueue(sc, queue.Event{Payload: encodeDeadLetter(d)}); err != nil {
			in.rollback()
			return false, fmt.Errorf("enqueue on %s: %w", in.dlq.queue, err)
		}
		in.dlq.n++
	}
	if f := in.a.commitFault; f != nil {
		if err = f(sc); err != nil {
			_ = in.txc.Abort(nil)
		}
	}
	if err == nil {
		err = in.commitCounted()
	}
	if err != nil {
		in.resetRoutes()
		if ou, ok := in.obs.(OutcomeObserver); ok && errors.Is(err, tx.ErrLogFailed) {
			ou.OutcomeUnknown(err)
		} else if in.obs != nil {
			in.obs.Aborted()
		}
		if errors.Is(err, tx.ErrConflict) {
			in.st.conflicts.Add(1)
			return true, nil
		}
		return false, err
	}
	if in.dlq.n > 0 {
		in.st.dead.Add(uint64(in.dlq.n))
		in.dlq.n = 0
	}
	in.st.steps.Add(1)
	if in.obs != nil {
		in.obs.Committed()
	}
	return false, in.bound()
}

// commitCounted commits the step and counts what it enqueued and consumed
// in the backlogs, holding backlogMu shared: with other commits, exclusive
// of syncBacklogs until the counts include the commit (backlog.go). The
// lock is released however the commit ends: a panic in it (a participant,
// tx.Finish) must not leave it held, or the next syncBacklogs, and every
// commit after it, would wait for good.
func (in *instance) commitCounted() error {
	in.a.backlogMu.RLock()
	defer in.a.backlogMu.RUnlock()
	if err := in.commit(); err != nil {
		return err
	}
	if h := in.a.afterCommit; h != nil {
		h(in)
	}
	for _, r := range in.outs {
		if r.n > 0 {
			in.st.emitted.Add(uint64(r.n))
			in.a.produced(r.queue, r.n) // consumers: woken by the queue
			r.n = 0
		}
	}
	for _, inp := range in.inputs {
		if inp.taken > 0 {
			in.a.consumed(inp.queue, in.fl.Name, inp.taken)
			inp.taken = 0
		}
	}
	return nil
}

func (in *instance) resetRoutes() {
	for _, r := range in.outs {
		r.n = 0
	}
	for _, inp := range in.inputs {
		inp.taken = 0
	}
	in.dlq.n = 0
}

// rollback aborts the step's transaction and tells the observer.
func (in *instance) rollback() {
	in.resetRoutes()
	_ = in.txc.Abort(nil)
	if in.obs != nil {
		in.obs.Aborted()
	}
}

// consumeStep runs one step over up to batch_size input events, retrying it
// (conflicts at once, failures with backoff) until it commits, the failed
// events are dead-lettered, or the app stops. It returns the number of
// events consumed.
func (in *instance) consumeStep(ctx context.Context) (int, error) {
	// The events' payloads are the step's: drop them with it.
	defer func() { clear(in.evs); in.evs = in.evs[:0] }()
	for {
		if in.stopping() {
			return 0, nil // removed by Scale: the input goes to the new owner
		}
		t0 := time.Now()
		// Before the transaction: a commit after its snapshot, which the
		// dequeue cannot see, must close the channel we keep.
		for _, inp := range in.inputs {
			if inp.looks() {
				inp.mark()
			}
		}
		sc, err := in.start(ctx)
		if err != nil {
			return 0, err
		}
		evs, err := in.dequeue()
		if err != nil {
			in.rollback()
			return 0, fmt.Errorf("flowlet %q instance %d: dequeue: %w", in.fl.Name, in.idx, err)
		}
		if len(evs) == 0 {
			in.resetRoutes()
			if in.txc.Abort(nil) == nil { // a timed-out step counts as such
				in.a.emptySteps.Add(1)
			}
			return 0, nil
		}
		retryNow, wait := in.process(sc, evs)
		if (ctx.Err() != nil || in.stopping()) && (retryNow || wait > 0) {
			in.rollback()
			return 0, nil // shutting down: the input comes again next run
		}
		if retryNow {
			in.rollback()
			continue
		}
		if wait > 0 {
			in.rollback()
			in.retryWait(ctx, wait)
			continue
		}
		conflict, err := in.finish(sc)
		if conflict {
			continue
		}
		if err != nil && isTooLarge(err) {
			redo, terr := in.tooLargeStep(sc, evs, err)
			if terr != nil {
				in.logger.Error("instance stopped", "err", terr)
				in.st.setErr(terr)
				return 0, terr
			}
			if redo {
				continue
			}
		}
		if err != nil && errors.Is(err, tx.ErrNotInProgress) {
			err = in.timedOut(err)
			if len(evs) > 1 {
				// One slow event is not its batch's failure: redo with
				// half the events, as for a step too large, down to the
				// one whose step times out alone (then its failure).
				in.logger.Warn("step timed out: redone with fewer events", "err", err, "events", len(evs))
				in.st.setErr(err)
				in.shrink(len(evs))
				continue
			}
		}
		if err != nil {
			if fatalErr(err) {
				return 0, err
			}
			// A failure of every event (a step of one that timed out).
			in.logger.Warn("step commit failed", "err", err, "events", len(evs))
			in.st.setErr(err)
			n := 0
			for _, e := range evs {
				n = max(n, in.fail(e.id, err))
			}
			in.retryWait(ctx, in.backoff(n))
			continue
		}
		if !in.frt.fails.empty() {
			for _, e := range evs {
				in.frt.fails.forget(e.id)
			}
		}
		in.committedAtLimit()
		in.st.processed.Add(uint64(len(evs)))
		in.frt.rate.add(len(evs))
		in.frt.hist.observe(time.Since(t0))
		if in.pub != nil {
			if err := in.publish(ctx); err != nil {
				return len(evs), err
			}
		}
		return len(evs), nil
	}
}

// timedOut says that a step's transaction (err: tx.ErrNotInProgress) ended
// before its commit.
func (in *instance) timedOut(err error) error {
	return fmt.Errorf("the step's transaction ended before its commit: it ran longer than step_timeout (%v): %w", in.a.opts.StepTimeout, err)
}

// fail records a failed attempt of event id and returns its attempt count.
func (in *instance) fail(id string, err error) int {
	n := in.frt.fails.add(id, err.Error(), in.backoff)
	in.st.failed.Add(1)
	return n
}

type inEvent struct {
	id   string // input queue + "/" + event id: unique across inputs
	ev   flowlet.Event
	dead *DeadLetter // replayed dead letter, for its attempts
}

// dequeue takes up to batch_size events, round-robin over the inputs.
func (in *instance) dequeue() ([]inEvent, error) {
	limit := in.batchLimit()
	clear(in.evs)
	out := in.evs[:0]
	defer func() { in.evs = out }()
	n := len(in.inputs)
	for _, inp := range in.inputs {
		inp.taken = 0
	}
	for i := 0; i < n && len(out) < limit; i++ {
		inp := in.inputs[(in.next+i)%n]
		if !inp.looks() {
			continue // found empty, and nothing committed to it since
		}
		want := limit - len(out)
		entries, err := inp.dequeue(want)
		if err != nil {
			inp.ready = nil
			return nil, fmt.Errorf("%s: %w", inp.queue, err)
		}
		if len(entries) > 0 {
			// More may be there; and an abort must find these again.
			inp.ready = nil
		} else {
			inp.ready = inp.readyAtMark()
		}
		inp.taken += len(entries)
		for j := range entries {
			e, err := inp.event(&entries[j])
			if err != nil {
				// Undecodable entries are not the flowlet's fault: keep them.
				e = inEvent{ev: flowlet.Event{ID: entries[j].ID.String(), Input: inp.queue, Payload: entries[j].Payload}}
				in.logger.Error("undecodable queue entry", "queue", inp.queue, "id", e.ev.ID, "err", err)
			}
			e.id = inp.queue + "/" + e.ev.ID
			out = append(out, e)
		}
		clear(entries) // the events hold what they need
	}
	in.next = (in.next + 1) % max(n, 1)
	return out, nil
}

// newInput is an input on queue qn; its consumer must say when to look
// again (queue.Notifier): the runtime does not poll its queues.
func newInput(qn, key string, c queue.Consumer) (*input, error) {
	n, ok := c.(queue.Notifier)
	if !ok {
		return nil, fmt.Errorf("consumer of %s: %w", qn, errNoNotifier)
	}
	gn, _ := c.(queue.GenNotifier)
	return &input{n: n, gn: gn, queue: qn, key: key, c: c}, nil
}

// mark notes, before a step's transaction, where the input's wake-ups
// stand.
func (inp *input) mark() {
	if inp.gn != nil {
		inp.gen = inp.gn.Gen()
		return
	}
	inp.next = inp.n.Ready()
}

// readyAtMark is a channel closed at the first wake-up after the last mark:
// for a dequeue that found the input empty.
func (inp *input) readyAtMark() <-chan struct{} {
	if inp.gn != nil {
		return inp.gn.ReadyAt(inp.gen)
	}
	return inp.next
}

// errNoNotifier: the queue backend's consumers cannot wake the runtime.
var errNoNotifier = errors.New("the queue backend's consumer does not implement queue.Notifier")

// looks reports whether the next step should dequeue from the input: it was
// never found empty, or something may have been committed to it since.
func (inp *input) looks() bool {
	if inp.ready == nil {
		return true
	}
	select {
	case <-inp.ready:
		inp.ready = nil
		return true
	default:
		return false
	}
}

// dequeue takes up to want entries, into the input's reused slice when the
// consumer can append.
func (inp *input) dequeue(want int) ([]queue.Entry, error) {
	da, ok := inp.c.(queue.DequeueAppender)
	if !ok {
		return inp.c.Dequeue(want)
	}
	es, err := da.DequeueAppend(inp.entries[:0], want)
	inp.entries = es[:0]
	return es, err
}

func (inp *input) event(en *queue.Entry) (inEvent, error) {
	if inp.replay {
		d, err := decodeDeadLetter("", en.Payload)
		if err != nil {
			return inEvent{}, err
		}
		return inEvent{ev: flowlet.Event{ID: d.EventID, Input: d.Input, Payload: d.Payload, Keys: d.Keys, EventTime: d.EventTime, TraceID: d.TraceID}, dead: &d}, nil
	}
	ev := flowlet.Event{ID: en.ID.String(), Input: inp.queue, EventTime: en.EventTime, TraceID: en.TraceID}
	if inp.key != "" && en.Key != nil {
		ev.Keys = append(ev.Keys, flowlet.KeyValue{Name: inp.key, Value: string(en.Key)})
	}
	var err error
	ev.Keys, ev.Payload, err = decodeEnvelope(en.Payload, ev.Keys)
	return inEvent{ev: ev}, err
}

// process runs the flowlet over evs inside the step. It returns retryNow
// when the step must be redone at once (a batch failed: redo it event by
// event), or wait > 0 when an event failed and has retries left (abort, wait,
// redo). Otherwise the step is ready to commit: events that failed more than
// retries.max times are in its dead letters.
func (in *instance) process(sc *stepCtx, evs []inEvent) (retryNow bool, wait time.Duration) {
	maxTries := in.fl.Retry.Max + 1
	failing := !in.frt.fails.empty()
	if failing {
		// An event another instance failed waits out its backoff here too.
		now := time.Now()
		for i := range evs {
			if at := in.frt.fails.get(evs[i].id).retryAt; at.After(now) {
				wait = max(wait, at.Sub(now))
			}
		}
		if wait > 0 {
			return false, wait
		}
	}
	live := evs // unless some are dead-lettered: then a copy of the rest
	copied := false
	for i := range evs {
		if !failing {
			break // nothing to dead-letter: live is evs
		}
		e := &evs[i]
		if f := in.frt.fails.get(e.id); f.attempts >= maxTries || f.perm {
			if !copied {
				live, copied = append(make([]inEvent, 0, len(evs)), evs[:i]...), true
			}
			in.deadLetter(sc, e, f.last)
			continue
		}
		if copied {
			live = append(live, *e)
		}
	}
	if len(live) == 0 {
		return false, 0
	}
	if in.batch != nil && !(failing && in.frt.fails.get(live[0].id).isolate) {
		batch := in.batchSlice(len(live))
		for i := range live {
			batch[i] = live[i].ev
		}
		sc.callErr = nil
		err := sc.call(func(c flowlet.Context) error { return in.batch.ProcessBatch(c, batch) })
		in.batchDone(batch)
		if err == nil {
			err = sc.callErr
		}
		if err == nil {
			return false, 0
		}
		if sc.Context.Err() != nil {
			return false, time.Nanosecond
		}
		in.logFailure(err, len(live))
		perm := flowlet.IsPermanent(err)
		if len(live) == 1 {
			n := in.fail(live[0].id, err)
			if n >= maxTries || perm {
				in.frt.fails.setPerm(live[0].id, perm)
				return true, 0 // dead-lettered on the redo
			}
			return false, in.backoff(n)
		}
		in.st.failed.Add(1)
		if !perm && !in.frt.fails.get(live[0].id).batchFailed {
			// A transient failure (a plugin process that was killed, a
			// timeout) is likely to pass: retry the whole batch once
			// before processing it event by event.
			in.frt.fails.update(live[0].id, func(f *failure) { f.batchFailed = true })
			return false, in.backoff(1)
		}
		for _, e := range live {
			in.frt.fails.update(e.id, func(f *failure) { f.isolate = true })
		}
		return true, 0
	}
	worst := 0
	for i := range live {
		e := &live[i]
		m := sc.begin(&e.ev)
		var err error
		if in.proc != nil {
			err = sc.call(func(c flowlet.Context) error { return in.proc.Process(c, e.ev) })
		} else {
			one := in.batchSlice(1)
			one[0] = e.ev
			err = sc.call(func(c flowlet.Context) error { return in.batch.ProcessBatch(c, one) })
			in.batchDone(one)
		}
		if err == nil {
			err = sc.callErr
		}
		if err == nil {
			continue
		}
		sc.rollback(m)
		if sc.Context.Err() != nil {
			return false, time.Nanosecond // shutting down: not the event's fault
		}
		in.logFailure(err, 1)
		n := in.fail(e.id, err)
		if perm := flowlet.IsPermanent(err); n >= maxTries || perm {
			// Dead-lettered in this step; and should the step be redone (an
			// event beside it has retries left), at the top of process
			// without running again: a permanent failure is tried once.
			in.frt.fails.setPerm(e.id, perm)
			in.deadLetter(sc, e, err.Error())
		} else {
			worst = max(worst, n)
		}
	}
	sc.tracking = false
	sc.event = nil
	if worst > 0 {
		return false, in.backoff(worst)
	}
	return false, 0
}

// batchSlice is the slice of n events for a ProcessBatch call: the
// instance's reused one for a BatchBorrower, a new one otherwise (the
// flowlet may keep it).
func (in *instance) batchSlice(n int) []flowlet.Event {
	if !in.borrow {
		return make([]flowlet.Event, n)
	}
	if cap(in.batchBuf) < n {
		in.batchBuf = make([]flowlet.Event, n)
	}
	return in.batchBuf[:n]
}

// batchDone drops the events' payloads and keys from a reused slice.
func (in *instance) batchDone(batch []flowlet.Event) {
	if in.borrow {
		clear(batch)
	}
}

func (in *instance) logFailure(err error, events int) {
	in.st.setErr(err)
	var pe *PanicError
	if errors.As(err, &pe) {
		in.logger.Error("flowlet panicked", "panic", fmt.Sprint(pe.Value), "events", events, "stack", pe.Stack)
		return
	}
	in.logger.Warn("step failed", "err", err, "events", events)
}

func (in *instance) deadLetter(sc *stepCtx, e *inEvent, reason string) {
	f := in.frt.fails.get(e.id)
	attempts := f.attempts
	if e.dead != nil {
		attempts += e.dead.Attempts
	}
	d := DeadLetter{
		Flowlet: in.fl.Name, Input: e.ev.Input, EventID: e.ev.ID, Error: reason, Attempts: attempts,
		Time: time.Now(), Keys: e.ev.Keys, EventTime: e.ev.EventTime, TraceID: e.ev.TraceID,
		Payload: e.ev.Payload,
	}
	if f.truncDL {
		truncateDeadLetter(&d)
	}
	d.Payload = append([]byte(nil), d.Payload...)
	sc.dead = append(sc.dead, d)
	in.logger.Warn("event moved to the dead-letter queue", "input", e.ev.Input, "id", e.ev.ID, "attempts", attempts,
		"truncated", d.Truncated, "err", d.Error)
}

// sourceStep runs one Generate in a transaction, with retries. A step to
// be redone (a failure, a split, a conflict) while the source is paused is left to
// runSource: it parks, and the step after the resume is a new one, its
// retries counted afresh (http_source refused the paused step's requests).
// atStop (drainAtStop): no pause holds the step and a failure is not retried.
func (in *instance) sourceStep(ctx context.Context, atStop bool) (srcResult, error) {
	tries := 0
	for redo := false; ; redo = true {
		if redo && !atStop && in.frt.paused.Load() {
			return srcMore, nil
		}
		t0 := time.Now()
		sc, err := in.start(ctx)
		if err != nil {
			return srcMore, err
		}
		gerr := sc.call(in.src.Generate)
		res := srcMore
		switch {
		case errors.Is(gerr, flowlet.ErrIdle):
			res, gerr = srcIdle, nil
		case errors.Is(gerr, flowlet.ErrEndOfInput):
			res, gerr = srcEnd, nil
		}
		if gerr == nil {
			gerr = sc.callErr
		}
		if gerr != nil {
			in.rollback()
			if ctx.Err() != nil && !atStop { // the app stops; at the stop, ctx is the step's own
				return srcIdle, nil
			}
			tries++
			in.logFailure(gerr, 0)
			in.st.failed.Add(1)
			if tries > in.fl.Retry.Max || flowlet.IsPermanent(gerr) || atStop {
				return srcMore, gerr
			}
			if !in.retryAfter(ctx, tries) {
				return srcIdle, nil
			}
			continue
		}
		if sc.empty() && res != srcEnd {
			in.resetRoutes()
			if in.txc.Abort(nil) == nil { // a timed-out step counts as such
				in.a.emptySteps.Add(1)
			}
			if in.obs != nil {
				in.obs.Committed()
			}
			return res, nil
		}
		emitted := len(sc.emits)
		conflict, err := in.finish(sc)
		if conflict {
			continue
		}
		if err != nil {
			if fatalErr(err) {
				return srcMore, err
			}
			tooLarge, slow := isTooLarge(err), errors.Is(err, tx.ErrNotInProgress)
			if tooLarge {
				err = in.tooLarge(sc, 0, err)
			} else if slow {
				err = in.timedOut(err)
			}
			// A splitter's step that fails for its size or its time is
			// not its input's failure as long as it can be split.
			split, _ := in.src.(StepSplitter)
			if split != nil && !tooLarge && !slow {
				split = nil
			}
			if split != nil && split.SplitStep() {
				in.logger.Warn("step redone with less input", "err", err, "events", emitted)
				in.st.setErr(err)
				continue
			}
			tries++
			in.logFailure(err, 0)
			in.st.failed.Add(1)
			if split != nil && (tooLarge || tries > in.fl.Retry.Max || atStop) {
				// One unit that fails alone: given up, the source goes on
				// (at the stop, not retried, it would be lost with the rest).
				if tooLarge {
					err = flowlet.Permanent(err)
				}
				in.logger.Warn("source gave up a step's input that fails alone", "err", err, "events", emitted, "attempts", tries)
				split.DropStep(err)
				// Its next step is a new one: it waits for a pause and
				// back-pressure as any other does (runSource).
				return srcMore, nil
			}
			if tries > in.fl.Retry.Max || atStop {
				return srcMore, err
			}
			if !in.retryAfter(ctx, tries) {
				return srcIdle, nil
			}
			continue
		}
		n := len(sc.emits)
		in.st.processed.Add(uint64(n))
		in.frt.rate.add(n)
		in.frt.hist.observe(time.Since(t0))
		return res, nil
	}
}

// tick runs Tick in a transaction of its own; after the retries its error
// goes to the dead-letter queue (input "tick") and the next tick comes as
// usual.
func (in *instance) tick(ctx context.Context) error {
	return in.ownStep(ctx, "tick", in.ticker.Tick)
}

// publish runs Publish in a transaction of its own. A sink that cannot
// publish after the retries stops the app: its output would silently fall
// behind otherwise.
func (in *instance) publish(ctx context.Context) error {
	if in.a.diskStop.Load() {
		return nil // it writes nothing it must: the next start publishes first (Publisher)
	}
	return in.ownStep(ctx, "publish", in.pub.Publish)
}

// errGaveUp marks an own step (publish) that failed after every retry.
type errGaveUp struct{ err error }

func (e *errGaveUp) Error() string { return e.err.Error() }
func (e *errGaveUp) Unwrap() error { return e.err }

func (in *instance) ownStep(ctx context.Context, what string, fn func(flowlet.Context) error) error {
	tries := 0
	var gaveUp error // a tick's last failure, after its retries: the step is its dead-letter record
	for {
		sc, err := in.start(ctx)
		if err != nil {
			return err
		}
		if gaveUp != nil {
			sc.dead = append(sc.dead, DeadLetter{Flowlet: in.fl.Name, Input: what, Error: gaveUp.Error(), Attempts: tries, Time: time.Now()})
		} else {
			err = sc.call(fn)
			if err == nil {
				err = sc.callErr
			}
			switch {
			case err != nil:
				in.rollback()
				if ctx.Err() != nil {
					return nil
				}
			case sc.empty():
				in.resetRoutes()
				if in.txc.Abort(nil) == nil { // a timed-out step counts as such
					in.a.emptySteps.Add(1)
				}
				return nil
			}
		}
		if err == nil {
			var conflict bool
			if conflict, err = in.finish(sc); conflict {
				continue
			}
			if err != nil && fatalErr(err) {
				return err
			}
			if err != nil && isTooLarge(err) {
				err = in.tooLarge(sc, 0, err)
			}
			if err == nil {
				return nil
			}
			if gaveUp != nil {
				// Even the record did not commit: the next tick comes as usual.
				in.logFailure(fmt.Errorf("%s: dead-letter record: %w", what, err), 0)
				return nil
			}
		}
		// The step failed: fn, or the commit of what it did (a step
		// timeout, too large), which is no less a failure of the step.
		tries++
		in.logFailure(fmt.Errorf("%s: %w", what, err), 0)
		in.st.failed.Add(1)
		if tries <= in.fl.Retry.Max && !flowlet.IsPermanent(err) {
			if !in.retryAfter(ctx, tries) {
				return nil // a restart ticks, and publishes first, again
			}
			continue
		}
		if what == "publish" {
			return &errGaveUp{fmt.Errorf("flowlet %q instance %d: publish failed after %d attempts: %w", in.fl.Name, in.idx, tries, err)}
		}
		gaveUp = err // give up on this tick: record it, commit the record
	}
}
