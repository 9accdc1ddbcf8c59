package flowlet

import (
	"errors"
	"fmt"
)

// Flowlet is one processing stage, as a Go value. It has no required method
// set of its own: a flowlet implements at least one of Processor,
// BatchProcessor, Source or Ticker, and optionally Initializer and Closer.
// The runtime finds out which by type assertion, as database/sql does with a
// driver's optional interfaces; Check says whether a value qualifies.
//
// One Flowlet value serves one instance: the runtime calls a factory once per
// instance and never calls one value from two goroutines at once, so a
// flowlet may keep plain fields (caches, buffers) without locking.
type Flowlet any

// Processor handles one input event per call. Everything it does through ctx
// (state writes, counter increments, emits) commits or aborts with the step's
// transaction, together with the dequeue of ev. Returning an error aborts the
// step: the same input is processed again after a backoff, up to the
// flowlet's retry limit, after which it moves to the dead-letter queue.
type Processor interface {
	Process(ctx Context, ev Event) error
}

// BatchProcessor handles every event of a step in one call (up to the
// flowlet's batch_size). When a flowlet implements both, the runtime calls
// ProcessBatch. An error aborts the whole batch.
type BatchProcessor interface {
	ProcessBatch(ctx Context, evs []Event) error
}

// Source produces events from outside the app (a file, a socket, a
// generator). The runtime calls Generate repeatedly, each call in its own
// transaction; a source keeps its position (a byte offset, a sequence number)
// in State, so that the position and the events it emitted commit together
// and a restart resumes exactly where the last commit left off.
//
// Generate returns ErrIdle when nothing is available right now (the step
// still commits, and the runtime waits before calling again) and
// ErrEndOfInput when the input is exhausted for good (the step commits and
// Generate is not called again).
type Source interface {
	Generate(ctx Context) error
}

// Ticker is implemented by flowlets that want a periodic call, CDAP's @Tick:
// windows that close, buffers that flush. With `tick: 1s` in the app YAML the
// runtime calls Tick about every second after the previous call ended, in a
// transaction of its own, so a tick's state writes and emits are as atomic
// as a step's. Ticks do not run concurrently with Process on the same
// instance. Every instance ticks, and tables are shared by the instances:
// a Tick that reports a whole table runs once per instance.
type Ticker interface {
	Tick(ctx Context) error
}

// Initializer is implemented by flowlets that read configuration or set up
// resources before the first step. An error stops the app before it starts.
type Initializer interface {
	Init(ic InitContext) error
}

// ConfigChecker is implemented by flowlets that can check their config
// without side effects (no file opened, no port bound). `flowrun validate`
// and the planning of every run call CheckConfig on a fresh instance (with
// Instance 0), so a mistake in `config:` is reported at its file:line:col
// before anything runs, instead of by Init when the app starts. A flowlet
// whose Init only reads its config can implement it by calling Init.
// A *ConfigError points at its field.
type ConfigChecker interface {
	CheckConfig(ic InitContext) error
}

// Closer is implemented by flowlets that hold resources. The runtime calls
// Close once, after the last step of the instance has committed or aborted.
type Closer interface {
	Close() error
}

var (
	// ErrIdle is returned by Source.Generate when no input is available yet.
	ErrIdle = errors.New("flowlet: no input available")
	// ErrEndOfInput is returned by Source.Generate when the input is exhausted.
	ErrEndOfInput = errors.New("flowlet: end of input")
	// ErrStepEnded is returned by a Context (the runtime's and a
	// plugin's), and by the tables and iterators it gave out, when used
	// after the call that received it returned: keep what you need from
	// it, not the Context.
	ErrStepEnded = errors.New("flowlet: Context used after its step ended (it is valid only during the call that receives it)")
)

// Check reports whether f can run as a flowlet: it must implement at least one
// of Processor, BatchProcessor, Source and Ticker. With info, it also checks
// that a source type implements Source or Ticker and that a non-source type
// can consume (Processor or BatchProcessor).
func Check(f Flowlet, info TypeInfo) error {
	if f == nil {
		return errors.New("flowlet: nil flowlet")
	}
	_, proc := f.(Processor)
	_, batch := f.(BatchProcessor)
	_, src := f.(Source)
	_, tick := f.(Ticker)
	switch {
	case !proc && !batch && !src && !tick:
		return fmt.Errorf("flowlet: %T implements none of Process, ProcessBatch, Generate and Tick", f)
	case info.Source && !src && !tick:
		return fmt.Errorf("flowlet: %T is declared a source but implements neither Generate nor Tick", f)
	case !info.Source && src:
		return fmt.Errorf("flowlet: %T implements Generate but is not declared a source (TypeInfo.Source)", f)
	case !info.Source && !proc && !batch && !tick:
		return fmt.Errorf("flowlet: %T consumes input but implements neither Process nor ProcessBatch", f)
	}
	return nil
}
