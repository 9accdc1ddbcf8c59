package runtime

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue/badgerq"
	"github.com/flowrun/flowrun/tx"
)

// A step commits in one atomic write of the store (specs/guarantees.md).
// Badger refuses a write with more than a fixed amount of keys and small
// values (values of at least the value threshold go to the value log and
// count as a pointer each), and the coordinator reports that as
// tx.ErrTooLarge: refused whole, nothing written. The runtime then
//
//   - retries a step of several input events at once with half as many (no
//     event has failed: the batch was too large, not an event), down to one
//     event; the smaller batch size is kept for a few commits and then
//     doubled back towards batch_size;
//   - fails an event whose step is too large on its own permanently: retrying
//     the same event gives the same writes, so it goes to the dead-letter
//     queue at once (without running the flowlet on it again), and the rest
//     of the input flows on.
//
// Either way the step is logged with a StepTooLargeError and counted in the
// flowlet's too_large (flowrun_flowlet_too_large_total).

// StepTooLargeError is a step that the store refused as too large for one
// atomic write (it wraps tx.ErrTooLarge). Nothing of it was written.
type StepTooLargeError struct {
	Flowlet  string
	Instance int
	// Events: the input events of the step (0 for a source's, tick's or
	// publish's step).
	Events int
	// Emits: events emitted, EmitBytes their size in the queues.
	Emits     int
	EmitBytes int64
	// StateWrites: table puts and deletes and counter adds the flowlet made
	// (of events not rolled back), StateBytes their keys and values.
	StateWrites int
	StateBytes  int64
	// DeadLetters: dead letters written by the step.
	DeadLetters int
	// LimitBytes and LimitEntries: the most bytes of keys and small values,
	// and the most entries, of one atomic write of the store.
	LimitBytes, LimitEntries int64
	// ValueThreshold: values of this size or more count as a pointer only.
	ValueThreshold int64
	Err            error
}

func (e *StepTooLargeError) Error() string {
	return fmt.Sprintf("flowlet %q instance %d: a step of %d input event(s) is too large for one atomic write of the store "+
		"(at most %d bytes of keys and values under %d bytes, %d entries): %d emits (%d bytes), %d state writes (%d bytes), %d dead letters: %v",
		e.Flowlet, e.Instance, e.Events, e.LimitBytes, e.ValueThreshold, e.LimitEntries,
		e.Emits, e.EmitBytes, e.StateWrites, e.StateBytes, e.DeadLetters, e.Err)
}

func (e *StepTooLargeError) Unwrap() error { return e.Err }

// atomicWriteLimits are the store's bounds on one write (badgerq.MaxWrite)
// and its value threshold.
func atomicWriteLimits(o badger.Options) (bytes, entries, threshold int64) {
	bytes, entries = badgerq.MaxWrite(o)
	return bytes, entries, o.ValueThreshold
}

// tooLarge describes a step the store refused as too large, counts it and
// logs it. events is the step's input events.
func (in *instance) tooLarge(sc *stepCtx, events int, err error) *StepTooLargeError {
	e := &StepTooLargeError{Flowlet: in.fl.Name, Instance: in.idx, Events: events, Emits: len(sc.emits),
		StateWrites: sc.writes, StateBytes: sc.writeBytes, DeadLetters: len(sc.dead), Err: err}
	for i := range sc.emits {
		e.EmitBytes += int64(sc.emits[i].ev.Size())
	}
	e.LimitBytes, e.LimitEntries, e.ValueThreshold = atomicWriteLimits(in.a.st.db.Opts())
	in.st.tooLarge.Add(1)
	in.st.setErr(e)
	in.logger.Warn("step too large for one atomic write", "err", e, "events", e.Events,
		"emits", e.Emits, "emit_bytes", e.EmitBytes, "state_writes", e.StateWrites, "state_bytes", e.StateBytes,
		"dead_letters", e.DeadLetters, "limit_bytes", e.LimitBytes, "limit_entries", e.LimitEntries)
	return e
}

// isTooLarge reports whether a commit was refused whole for its size.
func isTooLarge(err error) bool { return errors.Is(err, tx.ErrTooLarge) }

// Batch limits after a too-large step: the limit is halved at once, and
// doubled back after limitRestoreAfter commits at the reduced size.
const limitRestoreAfter = 8

// batchLimit is the most input events of the next step.
func (in *instance) batchLimit() int {
	if in.limit > 0 {
		return in.limit
	}
	return in.fl.BatchSize
}

// shrink halves the batch size after a step of n events was too large.
func (in *instance) shrink(n int) {
	in.limit = max(1, n/2)
	in.limitOK = 0
}

// committed counts a commit towards restoring the batch size.
func (in *instance) committedAtLimit() {
	if in.limit == 0 {
		return
	}
	if in.limitOK++; in.limitOK >= limitRestoreAfter {
		in.limit, in.limitOK = in.limit*2, 0
		if in.limit >= in.fl.BatchSize {
			in.limit = 0
		}
	}
}

// tooLargeStep handles a consuming step the store refused as too large. It
// returns redo when the step is to be redone at once: with half the events,
// with its one event dead-lettered, or, when that dead-letter step was too
// large itself, with a truncated dead-letter record of the event (see
// truncateDeadLetter). A truncated record that is still too large is an
// error: the instance cannot move past the event, so it stops, and with it
// the app (nothing of the step was written; the event stays in its queue).
func (in *instance) tooLargeStep(sc *stepCtx, evs []inEvent, err error) (redo bool, _ error) {
	e := in.tooLarge(sc, len(evs), err)
	if len(evs) > 1 {
		in.shrink(len(evs))
		return true, nil
	}
	id := evs[0].id
	if f := in.frt.fails.get(id); !f.perm && f.attempts < in.fl.Retry.Max+1 {
		in.fail(id, e)
		in.frt.fails.setPerm(id, true) // the redo dead-letters it, without processing it
		return true, nil
	}
	// The step was the event's dead-letter record alone.
	if !in.frt.fails.get(id).truncDL {
		in.frt.fails.update(id, func(f *failure) { f.truncDL = true })
		in.logger.Warn("dead-letter record too large for one atomic write: the event is dead-lettered with a truncated record",
			"input", evs[0].ev.Input, "id", evs[0].ev.ID, "payload_bytes", len(evs[0].ev.Payload))
		return true, nil
	}
	return false, fmt.Errorf("flowlet %q instance %d: event %s of %s cannot be dead-lettered: even its truncated dead-letter record "+
		"(the first %d of its %d payload bytes) is too large for one atomic write of the store; the instance stops, "+
		"nothing of the step was written and the event stays in its queue: %w",
		in.fl.Name, in.idx, evs[0].ev.ID, evs[0].ev.Input, min(len(evs[0].ev.Payload), truncatedPayloadBytes), len(evs[0].ev.Payload), e)
}

// A truncated dead-letter record keeps the event's metadata (input, id,
// keys, headers, attempts), the first truncatedErrorBytes of the error and
// the first truncatedPayloadBytes of the payload, and says so
// (DeadLetter.Truncated, PayloadBytes). It is not replayed.
const (
	truncatedPayloadBytes = 4 << 10
	truncatedErrorBytes   = 4 << 10
)

// truncateDeadLetter cuts d down to a truncated record.
func truncateDeadLetter(d *DeadLetter) {
	d.PayloadBytes = len(d.Payload)
	d.Truncated = true
	if len(d.Payload) > truncatedPayloadBytes {
		d.Payload = d.Payload[:truncatedPayloadBytes]
	}
	if len(d.Error) > truncatedErrorBytes {
		d.Error = d.Error[:truncatedErrorBytes] + "…(truncated)"
	}
	d.Error += fmt.Sprintf(" (dead-letter record truncated: too large for one atomic write; first %d of %d payload bytes kept)", len(d.Payload), d.PayloadBytes)
}
