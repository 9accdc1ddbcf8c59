package builtin

import (
	"fmt"

	"github.com/flowrun/flowrun/flowlet"
)

// Every source here is a runtime.StepSplitter: a step whose commit fails
// for its size or its time is redone with half its records (requests for
// http_source), down to one, and a record that fails alone is given up
// (DropStep): http_source answers its request with the error (the client
// resends); the others put the record in the source's dead-letter queue
// in a step of its own, with the position past it, as they do a line
// over max_line_bytes — but for a too-slow one of file_source and
// generator, which stops the source (RecordFailsAloneError): they can
// read it again after a restart, and it is not at fault.

// limitRestoreAfter: a step limit (SplitStep) doubles after this many
// commits, as a consumer's reduced batch size does in the runtime.
const limitRestoreAfter = 8

// stepLimit is the most records a source's step takes after a split.
type stepLimit struct {
	max int // 0: no limit
	ok  int // steps committed at max
}

// of bounds n, a step's records, by the limit.
func (l *stepLimit) of(n int) int {
	if l.max > 0 {
		return min(n, l.max)
	}
	return n
}

// split halves the limit to half a failed step of units records; a step
// of one record cannot be split.
func (l *stepLimit) split(units int) bool {
	if units < 2 {
		return false
	}
	l.max, l.ok = units/2, 0
	return true
}

// committed counts a committed step of records; after limitRestoreAfter
// the limit doubles, and it is gone once it reaches full.
func (l *stepLimit) committed(full int) {
	if l.max == 0 {
		return
	}
	if l.ok++; l.ok >= limitRestoreAfter {
		l.max, l.ok = l.max*2, 0
		if l.max >= full {
			l.max = 0
		}
	}
}

// RecordFailsAloneError stops a source whose record fails in a step of its
// own and is not dead-lettered: its step is slower than step_timeout (Slow:
// the machine's load or too low a step_timeout, not the record, is at
// fault, and a source's dead letters cannot be replayed), or it is too
// large for one atomic write of the store and the step has no dead-letter
// queue, or the step of its dead-letter record failed as well. The source
// stops rather than skip it; the record is not committed, and a restart
// meets it again.
type RecordFailsAloneError struct {
	Source string // the flowlet's name
	Record string // which record: "line at offset 12 of in.txt", "event 7"
	Err    error  // why its step failed
	Slow   bool   // its step ran past step_timeout
}

func (e *RecordFailsAloneError) Error() string {
	if e.Slow {
		return fmt.Sprintf("source %q: %s is slower than step_timeout in a step of its own (raise step_timeout, or lighten the machine's load), so it is not dead-lettered: %v", e.Source, e.Record, e.Err)
	}
	return fmt.Sprintf("source %q: %s fails in a step of its own and cannot be dead-lettered: %v", e.Source, e.Record, e.Err)
}

func (e *RecordFailsAloneError) Unwrap() error { return e.Err }

// droppedRecord is a record given up by DropStep, dead-lettered by the
// next step.
type droppedRecord struct {
	cause error
	// inStep: the step of its dead-letter record ran (and, unless it
	// committed, failed): failing again, the record stops the source.
	inStep bool
	stop   error // the next step's error: its dead-letter step failed too
}

// dropped is DropStep's record: a new droppedRecord, or, when the record
// is d's and its dead-letter step ran, d with the error that stops the
// source. A record given up for its time (err not permanent, as a too
// large one is) stops the source at once: it is not at fault.
func (d *droppedRecord) dropped(same bool, source, what string, err error) *droppedRecord {
	if d == nil || !same || !d.inStep {
		d = &droppedRecord{cause: err}
		if flowlet.IsPermanent(err) {
			return d
		}
	}
	d.stop = flowlet.Permanent(&RecordFailsAloneError{Source: source, Record: what, Err: err, Slow: !flowlet.IsPermanent(err)})
	return d
}

// deadLetterDropped puts record, given up for cause, in the step's
// dead-letter queue (its first deadPrefix bytes, as for a line over
// max_line_bytes); what names it.
func deadLetterDropped(ctx flowlet.Context, source, what string, record []byte, cause error) error {
	dl, ok := ctx.(deadLetterer)
	if !ok {
		return flowlet.Permanent(&RecordFailsAloneError{Source: source, Record: what, Err: cause})
	}
	kept := record[:min(len(record), deadPrefix)]
	return dl.DeadLetter(kept, fmt.Sprintf("%s: its step fails alone (%v); first %d of its %d bytes kept", what, cause, len(kept), len(record)))
}
