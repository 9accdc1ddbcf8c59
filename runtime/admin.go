package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// Inspect returns the running app's store for the read commands of Store
// (queues, tail, dead letters, tables, state) and for dead-letter replay,
// which the app then consumes at once. Close on it does nothing.
func (a *App) Inspect() *Store { return &Store{st: a.st, app: a} }

// Ingester is implemented by sources that accept events pushed to them (the
// HTTP source): Ingest hands the events over and returns once the step that
// emitted them committed (or ctx ended, or the source closed).
type Ingester interface {
	Ingest(ctx context.Context, events [][]byte) error
}

// IngestRefuser is implemented by Ingesters that can refuse ingests while
// the runtime runs none of their steps (the HTTP source): after
// RefuseIngest(err) every ingest not yet in a step — waiting, or in a step
// that aborts — is answered err at once, as is every later one, until
// RefuseIngest(nil). The runtime calls it when the source is paused (a
// PausedError) and resumed, and when the app begins to stop (an
// ErrNotRunning), so that no request waits for a step that will not come.
type IngestRefuser interface {
	RefuseIngest(err error)
}

// IngestEvent is one event given to App.Ingest.
type IngestEvent struct {
	Payload []byte
	// Keys are partition keys, as a flowlet's Emit sets them; an input
	// queue whose consumers hash by a key needs that key.
	Keys []flowlet.KeyValue
}

// Ingest delivers events to a flowlet. A source that implements Ingester
// (http_source) gets them as if they had been posted to it. Any other
// flowlet gets them on one of its input queues (input, which may be omitted
// when it has one input), in one transaction, as if the queue's producer
// had emitted them: every consumer group of that queue sees them. It
// returns the number of events delivered.
func (a *App) Ingest(ctx context.Context, flowletName, input string, events []IngestEvent) (int, error) {
	frt := a.byName[flowletName]
	if frt == nil {
		return 0, fmt.Errorf("%w %q", ErrUnknownFlowlet, flowletName)
	}
	// The request is checked whatever its events: a source has no input,
	// and an input the flowlet does not have, or a source that takes no
	// events, is refused even with no events (all answered 200 before).
	var ing Ingester
	if len(frt.fl.Inputs) == 0 {
		if input != "" {
			return 0, fmt.Errorf("%w: flowlet %q is a source: it has no input %q", ErrBadRequest, flowletName, input)
		}
		a.instMu.Lock()
		if len(frt.insts) > 0 {
			ing, _ = frt.insts[0].f.(Ingester)
		}
		a.instMu.Unlock()
		if ing == nil {
			return 0, fmt.Errorf("%w: flowlet %q is a source that does not accept events (http_source does)", ErrBadRequest, flowletName)
		}
	} else {
		if input == "" {
			if len(frt.fl.Inputs) != 1 {
				return 0, fmt.Errorf("%w: flowlet %q has %d inputs (%v): name one", ErrBadRequest, flowletName, len(frt.fl.Inputs), frt.fl.Inputs)
			}
			input = frt.fl.Inputs[0]
		}
		if !slices.Contains(frt.fl.Inputs, input) {
			return 0, fmt.Errorf("%w: %q is not an input of flowlet %q (inputs: %v)", ErrBadRequest, input, flowletName, frt.fl.Inputs)
		}
	}
	if len(events) == 0 {
		return 0, nil
	}
	if ing != nil {
		if !a.running.Load() {
			return 0, ErrNotRunning
		}
		raw := make([][]byte, len(events))
		for i, e := range events {
			if len(e.Keys) > 0 {
				return 0, fmt.Errorf("%w: source %q takes payloads only, no keys", ErrBadRequest, flowletName)
			}
			if len(e.Payload) > MaxPayload {
				return 0, fmt.Errorf("%w: event %d: %d bytes (max %d)", ErrBadRequest, i, len(e.Payload), MaxPayload)
			}
			raw[i] = e.Payload
		}
		if err := ing.Ingest(ctx, raw); err != nil {
			var ou interface{ OutcomeUnknown() bool }
			if errors.As(err, &ou) && ou.OutcomeUnknown() {
				// Before the stop's cases: the app stops after such a
				// failure, and "not running" would say not committed.
				return 0, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
			}
			if ctx.Err() == nil && !a.running.Load() {
				if errors.Is(err, ErrNotRunning) {
					return 0, err // refused as the stop began (errStopping): says so once
				}
				// The source closed: the app stopped meanwhile.
				return 0, fmt.Errorf("%w: %w", ErrNotRunning, err)
			}
			if ctx.Err() == nil && frt.st.done.Load() > 0 {
				// The source closed when it stopped (sourceStopped).
				return 0, fmt.Errorf("%w: %q: %w", ErrSourceStopped, flowletName, err)
			}
			if flowlet.IsPermanent(err) {
				// Given up as too large for one step (StepSplitter):
				// the same events would fail the same way.
				return 0, fmt.Errorf("%w: %w", ErrBadRequest, err)
			}
			if ctx.Err() == nil && !errors.Is(err, ErrPaused) && !errors.Is(err, ErrNotRunning) {
				// Given up as too slow (StepSplitter), the source running on.
				return 0, fmt.Errorf("%w: %w", ErrNotCommitted, err)
			}
			return 0, err
		}
		return len(events), nil
	}
	keyName := a.plan.Queue(input).Key
	evs := make([]queue.Event, len(events))
	for i, e := range events {
		if len(e.Payload) > MaxPayload {
			return 0, fmt.Errorf("%w: event %d: %d bytes (max %d)", ErrBadRequest, i, len(e.Payload), MaxPayload)
		}
		var key []byte
		if keyName != "" {
			for _, kv := range e.Keys {
				if kv.Name == keyName {
					key = []byte(kv.Value)
				}
			}
			if key == nil {
				return 0, fmt.Errorf("%w: event %d: queue %s is partitioned by key %q; give it", ErrBadRequest, i, input, keyName)
			}
		}
		evs[i] = queue.Event{Payload: appendEnvelope(nil, e.Keys, keyName, e.Payload), Key: key}
	}
	p, err := a.st.queues.Producer(input)
	if err != nil {
		return 0, err
	}
	txc := a.st.coord.NewContext(p)
	for {
		if _, err := txc.Start(a.opts.StepTimeout); err != nil {
			return 0, err
		}
		for i := range evs {
			if err := p.Enqueue(ctx, evs[i]); err != nil {
				txc.Abort(nil)
				if errors.Is(err, queue.ErrEventTooLarge) {
					err = fmt.Errorf("%w: %w", ErrBadRequest, err)
				}
				return 0, err
			}
		}
		// The commit and its count, as one (backlog.go); the consumers
		// are woken by the queue.
		err := a.commitCounted(txc.Finish, func() { a.produced(input, len(evs)) })
		if errors.Is(err, tx.ErrConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		break
	}
	a.log.Info("ingested", "flowlet", flowletName, "queue", input, "events", len(evs))
	return len(evs), nil
}
