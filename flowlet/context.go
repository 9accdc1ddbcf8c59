package flowlet

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Context is what a flowlet gets for one step (a Process, ProcessBatch,
// Generate or Tick call). Everything done through it belongs to the step's
// transaction: emits become visible downstream, and state writes become
// visible to later steps, only when the step commits; if it aborts they are
// dropped as if they never happened.
//
// The embedded context.Context is cancelled when the runtime shuts down or
// the step's transaction times out; pass it to anything that blocks. A
// Context is valid only during the call that receives it: goroutines the
// call starts may use it until the call returns (their calls are
// serialized), and afterwards every call answers ErrStepEnded, as do the
// tables, counters and iterators it gave out, and its Done channel (the one
// given during the call too) is closed, with ErrStepEnded as the cause of
// the contexts derived from it. An Iterator itself is for one goroutine.
type Context interface {
	context.Context

	// Emit sends payload on the named output ("out" when the flowlet has a
	// single default output). The payload is copied. When the output's queue
	// is hash-partitioned, the producer must set the queue's key with
	// Key(name, value) on every event; emitting without it is an error.
	Emit(output string, payload []byte, opts ...EmitOption) error

	// State returns the flowlet's transactional key-value table of that
	// name. Every instance of the flowlet shares its tables; hash
	// partitioning keeps instances on disjoint keys.
	State(name string) Table

	// Counters returns the flowlet's counter table of that name.
	Counters(name string) Counters

	// Name is the flowlet's name in the app; Instance its instance index in
	// [0, Instances).
	Name() string
	Instance() int
	Instances() int

	// Logger logs with the flowlet's name and instance attached.
	Logger() *slog.Logger
}

// InitContext is what Init receives.
type InitContext struct {
	// Name is the flowlet's name in the app, Instance its index in
	// [0, Instances).
	Name      string
	Instance  int
	Instances int
	// Config is the flowlet's `config:` mapping from the app YAML.
	Config Config
	// Logger logs with the flowlet's name and instance attached.
	Logger *slog.Logger
}

// Table is a transactional key-value table. Reads see the step's snapshot
// (everything committed before the step started) plus the step's own
// writes; writes commit with the step. Two steps that write the same key
// concurrently conflict: one of them aborts and is retried, so a
// read-modify-write is safe. For hot counters use Counters, which never
// conflict.
//
// Keys and values are byte strings; the table copies them. A key is at most
// MaxKeySize bytes. A call that fails fails the event (or step) it was made
// for, even if the flowlet ignores its error, as a failed Emit does.
type Table interface {
	// Get returns the value of key and whether it exists.
	Get(key []byte) (value []byte, ok bool, err error)
	// Put sets key to value.
	Put(key, value []byte) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(key []byte) error
	// Scan iterates over keys in ascending byte order. Close the iterator.
	Scan(opts ScanOptions) Iterator
}

// MaxKeySize is the largest key a Table or Counters accepts.
const MaxKeySize = 4096

// ValidStateName reports whether name is a valid Table or Counters name:
// [a-z0-9][a-z0-9_-]{0,62}, the rule of names in the app YAML. Every call
// on a table or counters of another name fails with ErrInvalidName.
func ValidStateName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch b := name[i]; {
		case 'a' <= b && b <= 'z', '0' <= b && b <= '9':
		case (b == '_' || b == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

var (
	// ErrKeyTooLarge is wrapped by the error of a Table or Counters call
	// given a key over MaxKeySize; nothing is written.
	ErrKeyTooLarge = errors.New("flowlet: key too large")
	// ErrInvalidName is wrapped by the error of every call on a Table or
	// Counters whose name is not [a-z0-9][a-z0-9_-]{0,62}.
	ErrInvalidName = errors.New("flowlet: invalid table name")
)

// ScanOptions select the keys a scan visits: those with Prefix, from Start
// (inclusive) to End (exclusive; nil means no bound), at most Limit of them
// (0 means no limit).
type ScanOptions struct {
	Prefix     []byte
	Start, End []byte
	Limit      int
}

// Match reports whether key is selected by o, ignoring Limit.
func (o ScanOptions) Match(key []byte) bool {
	if len(key) < len(o.Prefix) || string(key[:len(o.Prefix)]) != string(o.Prefix) {
		return false
	}
	if o.Start != nil && string(key) < string(o.Start) {
		return false
	}
	return o.End == nil || string(key) < string(o.End)
}

// Iterator walks the result of a scan:
//
//	it := ctx.State("users").Scan(flowlet.ScanOptions{Prefix: []byte("u/"), Limit: 100})
//	defer it.Close()
//	for it.Next() {
//		use(it.Key(), it.Value())
//	}
//	if err := it.Err(); err != nil { ... }
//
// Key and Value are valid until the next call to Next. A scan that ends on
// an error fails the event (or step), as a failed call does, even if Err
// is not checked.
type Iterator interface {
	// Next moves to the next entry and reports whether there is one.
	Next() bool
	// Key and Value are the current entry's (nil before the first Next).
	Key() []byte
	Value() []byte
	// Err is what ended the scan early, nil when it ran to its end.
	Err() error
	// Close releases the scan.
	Close() error
}

// Counters is a table of int64 counters whose increments never conflict:
// many instances and steps may Add to the same key concurrently and every
// committed Add is counted exactly once. Get returns the sum of the
// increments committed before the step started plus the step's own. Counts
// are int64 and wrap around on overflow (two's complement), the same in
// every read whatever order the increments are summed in. As for a Table, a
// call that fails fails the event (or step), even if its error is ignored.
type Counters interface {
	// Add adds delta (negative to subtract) to the counter of key; a
	// counter never added to is 0.
	Add(key []byte, delta int64) error
	// Get returns the counter of key: the committed sum plus the step's
	// own Adds.
	Get(key []byte) (int64, error)
	// Scan visits counters in key order; Value is not used, Count is.
	Scan(opts ScanOptions) CounterIterator
}

// CounterIterator walks counters: Key and Count of the current one. Its
// methods are as Iterator's, with Count for Value.
type CounterIterator interface {
	Next() bool
	Key() []byte
	Count() int64
	Err() error
	Close() error
}

// EmitOption adds a partition key or a header to an emitted event.
type EmitOption struct {
	kind  emitKind
	name  string
	value string
	t     time.Time
	p     uint8
}

type emitKind uint8

const (
	optKey emitKind = iota + 1
	optEventTime
	optTraceID
	optPriority
)

// Key sets the partition key name to value. A hash-partitioned queue routes
// every event with the same value of its key to the same consumer instance,
// in order.
func Key(name, value string) EmitOption { return EmitOption{kind: optKey, name: name, value: value} }

// EventTime sets the event-time header.
func EventTime(t time.Time) EmitOption { return EmitOption{kind: optEventTime, t: t} }

// TraceID sets the trace header.
func TraceID(id string) EmitOption { return EmitOption{kind: optTraceID, value: id} }

// Priority sets the event's priority: within a partition, higher priorities
// are dequeued first. The default is 0.
func Priority(p uint8) EmitOption { return EmitOption{kind: optPriority, p: p} }

// EmitOptions is the resolved form of a list of EmitOption, for runtimes and
// test helpers. Later options override earlier ones of the same kind (and
// the same key name).
type EmitOptions struct {
	Keys      []KeyValue
	EventTime time.Time
	TraceID   string
	Priority  uint8
}

// ResolveEmitOptions folds opts into an EmitOptions. It allocates Keys when
// opts has keys; a runtime that resolves every emit uses Resolve on an
// EmitOptions of its own instead.
func ResolveEmitOptions(opts []EmitOption) EmitOptions {
	var o EmitOptions
	o.Resolve(opts)
	return o
}

// Resolve folds opts into o, replacing what o held, like
// ResolveEmitOptions, but reuses the capacity of o.Keys: an EmitOptions kept
// from emit to emit resolves without allocating. The previous Keys are
// overwritten, so a caller must not keep them (or o.Keys) across calls.
func (o *EmitOptions) Resolve(opts []EmitOption) {
	keys := o.Keys
	clear(keys) // drop references to the previous values
	*o = EmitOptions{Keys: keys[:0]}
	for _, op := range opts {
		switch op.kind {
		case optKey:
			replaced := false
			for i := range o.Keys {
				if o.Keys[i].Name == op.name {
					o.Keys[i].Value, replaced = op.value, true
				}
			}
			if !replaced {
				o.Keys = append(o.Keys, KeyValue{op.name, op.value})
			}
		case optEventTime:
			o.EventTime = op.t
		case optTraceID:
			o.TraceID = op.value
		case optPriority:
			o.Priority = op.p
		}
	}
}

// Key returns the value of the partition key name and whether it is set.
func (o *EmitOptions) Key(name string) (string, bool) {
	for _, kv := range o.Keys {
		if kv.Name == name {
			return kv.Value, true
		}
	}
	return "", false
}
