package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// Errors of the live operations, for callers (the HTTP API) to tell a bad
// request from a failure.
var (
	ErrUnknownFlowlet = errors.New("unknown flowlet")
	ErrNotRunning     = errors.New("app is not running")
	ErrNotScalable    = errors.New("flowlet cannot be scaled")
	ErrBadRequest     = errors.New("bad request")
	ErrNotPaused      = errors.New("flowlet is not paused")
	// ErrPaused: an ingest into a paused source (an http_source) was
	// refused; the events were not taken. It is back-pressure: send them
	// again after the resume (HTTP: 503 with Retry-After, PausedError).
	ErrPaused = errors.New("source is paused")
	// ErrScaleBusy: Scale's context ended while it waited for a scale in
	// progress (a scale-down completing in the background, see Scale).
	ErrScaleBusy = errors.New("a scale is still in progress")
	// ErrSourceStopped: Ingest to a source that stopped (it gave up after
	// its retries) while the rest of the app runs on. It is also an
	// ErrNotRunning (errors.Is): the source does not run.
	ErrSourceStopped error = sourceStoppedError{}
	// ErrNotCommitted: an ingest whose events the source took but could
	// not commit (its step failed alone, as too slow, after its retries)
	// while the source runs on. Nothing of it was committed: sending it
	// again is safe (HTTP: 503).
	ErrNotCommitted = errors.New("events not committed")
	// ErrOutcomeUnknown: an ingest whose step's commit failed with the
	// commit log (tx.ErrLogFailed): its events may or may not have been
	// committed, and the app stops. Sending them again may count them
	// twice (HTTP: 500).
	ErrOutcomeUnknown = errors.New("commit outcome unknown")
)

// PausedError is the error an ingest into a paused source gets (errors.Is
// ErrPaused). RetryAfter is the wait its HTTP answer advises (Retry-After):
// the source takes events again as soon as it is resumed.
type PausedError struct{ Flowlet string }

// PausedRetryAfter is the Retry-After of an ingest refused by a pause.
const PausedRetryAfter = time.Second

func (e *PausedError) Error() string {
	return fmt.Sprintf("%s: %q takes no events until resumed (none of these was taken: send them again)", ErrPaused, e.Flowlet)
}
func (e *PausedError) Is(target error) bool      { return target == ErrPaused }
func (e *PausedError) RetryAfter() time.Duration { return PausedRetryAfter }

type sourceStoppedError struct{}

func (sourceStoppedError) Error() string        { return "source has stopped" }
func (sourceStoppedError) Is(target error) bool { return target == ErrNotRunning }

// MaxScale bounds Scale: a flowlet's instances split the partitions of its
// input queues, so more instances than partitions would sit idle.
func (a *App) maxScale(frt *flowletRT) int {
	m := queue.MaxInstances
	// An inspection read (enter), as Status's: a Scale after Run returned
	// (then ErrNotRunning) may come while the store closes.
	exit, ok := a.queueRead()
	if !ok {
		return m
	}
	defer exit()
	for _, q := range frt.fl.Inputs {
		if info, err := a.st.queues.Info(q); err == nil {
			m = min(m, info.Config.Partitions)
		}
	}
	return m
}

// Scale changes a flowlet's instance count while the app runs and events
// flow. Scaling down, the instances beyond n finish their in-flight step
// (it commits or aborts) and stop; then the consumer groups of every input
// queue of the flowlet are rescaled, so each partition moves to its new
// owner, which resumes at the last committed cursor. Scaling up, the groups
// are rescaled first and the new instances start. A partition is read by
// one transaction at a time (the queue's lease), so nothing is lost or
// delivered twice and hash groups keep each key's order.
//
// Sources cannot be scaled (their instances split the input by instance
// count, e.g. the generator's numbers). The count lasts until the app stops:
// the next run starts with the count of the app file (and rescales the
// groups back). It returns the previous count. If ctx ends while removed
// instances finish their steps in flight, Scale returns ctx's error and the
// scale-down completes once those steps are done; a Scale meanwhile waits
// for it, or returns ErrScaleBusy (and ctx's error) if its ctx ends first.
func (a *App) Scale(ctx context.Context, flowletName string, n int) (int, error) {
	frt := a.byName[flowletName]
	if frt == nil {
		return 0, fmt.Errorf("%w %q", ErrUnknownFlowlet, flowletName)
	}
	if len(frt.fl.Inputs) == 0 {
		return 0, fmt.Errorf("%w: %q is a source (its instances split the input by instance count)", ErrNotScalable, flowletName)
	}
	if frt.typ.Info.SingleInstance && n != 1 {
		return 0, fmt.Errorf("%w: %q (type %s) runs as a single instance", ErrNotScalable, flowletName, frt.typ.Name)
	}
	if m := a.maxScale(frt); n < 1 || n > m {
		return 0, fmt.Errorf("%w: instances must be in [1, %d] (the partitions of its input queues), not %d", ErrBadRequest, m, n)
	}
	// A scale-down completing in the background holds it until its
	// removed instances' steps are done: wait for it as long as ctx lets.
	if err := a.scaleMu.LockContext(ctx); err != nil {
		return 0, fmt.Errorf("%w: %s: waiting for it to complete: %w", ErrScaleBusy, flowletName, err)
	}
	unlock := true // false: a scale-down finishing in the background holds it
	defer func() {
		if unlock {
			a.scaleMu.Unlock()
		}
	}()
	if !a.running.Load() {
		return 0, ErrNotRunning
	}
	old := int(frt.n.Load())
	if n == old {
		return old, nil
	}
	log := a.log.With("flowlet", flowletName)
	log.Info("scaling", "from", old, "to", n)
	queues := append(append([]string(nil), frt.fl.Inputs...), ReplayName(flowletName))
	rescale := func(to int) error {
		for _, q := range queues {
			if err := a.st.queues.Rescale(q, flowletName, to); err != nil {
				return fmt.Errorf("queue %s: rescale group %s to %d: %w", q, flowletName, to, err)
			}
		}
		return nil
	}
	if n < old {
		a.instMu.Lock()
		gone := append([]*instance(nil), frt.insts[n:]...)
		a.instMu.Unlock()
		for _, in := range gone {
			close(in.stop)
		}
		finish := func() error {
			a.instMu.Lock()
			frt.insts = frt.insts[:n]
			a.removeLocked(gone)
			a.instMu.Unlock()
			for _, in := range gone {
				if err := in.close(); err != nil {
					log.Warn("closing a removed instance", "instance", in.idx, "err", err)
				}
			}
			frt.n.Store(int32(n))
			if err := rescale(n); err != nil {
				log.Error("scale down: rescale failed; partitions of removed instances are not read until the next run", "err", err)
				return err
			}
			log.Info("scaled", "from", old, "to", n)
			return nil
		}
		for _, in := range gone {
			select {
			case <-in.done:
			case <-ctx.Done():
				// The drivers stop once their steps in flight are done;
				// the scale-down finishes then, in the background, holding
				// scaleMu until it did: a Scale meanwhile waits for it
				// rather than find stopped instances counted live (a
				// retry closed their stop channels again, a scale back
				// up found nothing to do).
				unlock = false
				go func() {
					defer a.scaleMu.Unlock()
					for _, in := range gone {
						<-in.done
					}
					_ = finish()
				}()
				return old, fmt.Errorf("scale %s: waiting for in-flight steps: %w (the scale-down completes once they are done)", flowletName, ctx.Err())
			}
		}
		if err := finish(); err != nil {
			return old, err
		}
		return old, nil
	} else {
		if err := rescale(n); err != nil {
			if rerr := rescale(old); rerr != nil {
				log.Error("scale up: rescale back failed", "err", rerr)
			}
			return old, err
		}
		frt.n.Store(int32(n))
		var added []*instance
		for i := old; i < n; i++ {
			in, err := a.newInstance(frt, i)
			if err != nil {
				for _, in := range added {
					in.close()
				}
				frt.n.Store(int32(old))
				if rerr := rescale(old); rerr != nil {
					log.Error("scale up: rescale back failed", "err", rerr)
				}
				return old, fmt.Errorf("%w: %s to %d instances: %w", ErrNotScalable, flowletName, n, err)
			}
			added = append(added, in)
		}
		a.instMu.Lock()
		for _, in := range added {
			frt.insts = append(frt.insts, in)
			a.instances = append(a.instances, in)
			a.startLocked(in)
		}
		a.instMu.Unlock()
	}
	// The remaining instances may own partitions with a backlog now: the
	// queues' Rescale woke them (queue.Notifier).
	log.Info("scaled", "from", old, "to", n)
	return old, nil
}

func (a *App) removeLocked(gone []*instance) {
	drop := map[*instance]bool{}
	for _, in := range gone {
		drop[in] = true
	}
	keep := a.instances[:0]
	for _, in := range a.instances {
		if !drop[in] {
			keep = append(keep, in)
		}
	}
	clear(a.instances[len(keep):])
	a.instances = keep
}

// Pause makes a flowlet's instances start no new step (a step in flight
// finishes) until Resume. Its input queues fill meanwhile. It returns at
// once; WaitPaused waits for the steps in flight. A paused source that
// takes ingests (IngestRefuser: http_source) refuses them with a
// PausedError until Resume, the requests already waiting included (those
// in the step in flight commit with it). Before Run it pauses the
// flowlet from the start; once Run returned (or the app closed) it returns
// ErrNotRunning, as Resume does.
func (a *App) Pause(flowletName string) error {
	frt := a.byName[flowletName]
	if frt == nil {
		return fmt.Errorf("%w %q", ErrUnknownFlowlet, flowletName)
	}
	a.pauseMu.Lock()
	defer a.pauseMu.Unlock()
	if a.ended.Load() {
		return ErrNotRunning // before Run it may pause: Run starts paused
	}
	if !frt.paused.Swap(true) {
		a.log.Info("paused", "flowlet", flowletName)
	}
	if frt.source {
		// Its requests would wait for the resume: refused at once instead.
		a.refuseIngest(frt, &PausedError{Flowlet: flowletName})
	}
	return nil
}

// Resume undoes Pause.
func (a *App) Resume(flowletName string) error {
	frt := a.byName[flowletName]
	if frt == nil {
		return fmt.Errorf("%w %q", ErrUnknownFlowlet, flowletName)
	}
	a.pauseMu.Lock()
	defer a.pauseMu.Unlock()
	if a.ended.Load() {
		return ErrNotRunning
	}
	if frt.paused.Swap(false) {
		a.log.Info("resumed", "flowlet", flowletName)
	}
	if frt.source {
		a.refuseIngest(frt, nil)
	}
	frt.resume.notify()
	frt.parked.notify() // WaitPaused: not paused any more
	return nil
}

// WaitPaused returns once the paused flowlet is parked: none of its
// instances is in a step (each finished the one in flight, its commits
// durable) and none starts one until Resume (FlowletStatus.Parked). It
// returns an error wrapping ErrNotPaused when the flowlet is not paused or
// is resumed meanwhile, ctx's error when ctx ends first. A step retrying
// a failed event (retries.backoff) is in flight until it commits.
func (a *App) WaitPaused(ctx context.Context, flowletName string) error {
	frt := a.byName[flowletName]
	if frt == nil {
		return fmt.Errorf("%w %q", ErrUnknownFlowlet, flowletName)
	}
	for {
		ch := frt.parked.wait() // before looking: a notify in between closes it
		if !frt.paused.Load() {
			return fmt.Errorf("%w: %q", ErrNotPaused, flowletName)
		}
		if frt.busy.Load() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Ready reports whether the app runs and every flowlet instance has started
// (sinks published what an earlier run committed); otherwise it lists the
// flowlets still waiting.
func (a *App) Ready() (bool, []string) {
	if !a.running.Load() {
		return false, nil
	}
	a.instMu.Lock()
	defer a.instMu.Unlock()
	var waiting []string
	for _, f := range a.flowlets {
		for _, in := range f.insts {
			if !in.started.Load() {
				waiting = append(waiting, f.fl.Name)
				break
			}
		}
	}
	return len(waiting) == 0, waiting
}

// Instances is the live instance count of a flowlet (0 if unknown).
func (a *App) Instances(flowletName string) int {
	if frt := a.byName[flowletName]; frt != nil {
		return int(frt.n.Load())
	}
	return 0
}

// stepHist counts committed step durations in the buckets of tx.Histogram
// (powers of two microseconds).
type stepHist struct {
	counts [len(tx.Histogram{}.Counts)]atomic.Uint64
	count  atomic.Uint64
	sum    atomic.Int64
}

func (h *stepHist) observe(d time.Duration) {
	us := uint64(d / time.Microsecond)
	i := 0
	for us > 0 && i < len(h.counts)-1 {
		us >>= 1
		i++
	}
	h.counts[i].Add(1)
	h.count.Add(1)
	h.sum.Add(int64(d))
}

func (h *stepHist) snapshot() tx.Histogram {
	var s tx.Histogram
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Count = h.count.Load()
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// StepDurations returns, per flowlet, the distribution of committed step
// durations (from the start of the attempt that committed to its commit).
func (a *App) StepDurations() map[string]tx.Histogram {
	m := make(map[string]tx.Histogram, len(a.flowlets))
	for _, f := range a.flowlets {
		m[f.fl.Name] = f.hist.snapshot()
	}
	return m
}

// refuseIngest makes the instances of source frt that take ingests refuse
// them with err (nil: take them again). Under pauseMu.
func (a *App) refuseIngest(frt *flowletRT, err error) {
	a.instMu.Lock()
	defer a.instMu.Unlock()
	for _, in := range frt.insts {
		if r, ok := in.f.(IngestRefuser); ok {
			r.RefuseIngest(err)
		}
	}
}

// errStopping answers the ingests waiting when the app begins to stop.
var errStopping = fmt.Errorf("%w: flowrun is stopping; the events were not committed, send them again", ErrNotRunning)

// refuseIngestAll refuses every source's ingests for good: the app stops
// (ended is set), no step will take them.
func (a *App) refuseIngestAll() {
	a.pauseMu.Lock()
	defer a.pauseMu.Unlock()
	for _, frt := range a.flowlets {
		if frt.source {
			a.refuseIngest(frt, errStopping)
		}
	}
}
