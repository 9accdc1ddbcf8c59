package queue

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error of this package and of a conforming Backend
// wraps one of them, so callers test with errors.Is.
var (
	// ErrBadName: a queue or group name is empty, too long or not a plain
	// identifier (no path separators, no leading dot).
	ErrBadName = errors.New("queue: invalid name")
	// ErrBadConfig: a queue or group configuration, or an argument (a
	// negative Dequeue count, a Scan partition the queue does not have), is
	// out of range.
	ErrBadConfig = errors.New("queue: invalid configuration")
	// ErrExists: a queue or group of that name exists already.
	ErrExists = errors.New("queue: already exists")
	// ErrUnknownQueue: no queue of that name (or it was deleted).
	ErrUnknownQueue = errors.New("queue: unknown queue")
	// ErrUnknownGroup: the queue has no consumer group of that name.
	ErrUnknownGroup = errors.New("queue: unknown consumer group")
	// ErrUnknownInstance: the instance number is outside the group's current
	// instance count (e.g. after the group was scaled down).
	ErrUnknownInstance = errors.New("queue: unknown group instance")
	// ErrEventTooLarge: an event exceeds the queue's MaxEventBytes, or its
	// MaxBytes (it could never fit, so Enqueue fails at once).
	ErrEventTooLarge = errors.New("queue: event too large")
	// ErrQueueFull: the queue is at its maximum depth (and the configured
	// wait, if any, ran out).
	ErrQueueFull = errors.New("queue: queue full")
	// ErrExhausted: a backend ran out of ids it never reuses (badgerq:
	// 65,535 groups added to one queue over its life, 2^32-1 queues
	// created).
	ErrExhausted = errors.New("queue: ids exhausted")
	// ErrNoTx: Enqueue or Dequeue outside a transaction (badgerq: also a
	// consumer's Stage or Persist, e.g. after a call of another Context
	// ended its transaction).
	ErrNoTx = errors.New("queue: no transaction in progress")
	// ErrInUse: a consumer handed a transaction while another one it was
	// handed is still in progress (one consumer in two Contexts at once).
	ErrInUse = errors.New("queue: consumer in use by another transaction")
	// ErrClosed: the backend was closed.
	ErrClosed = errors.New("queue: backend closed")
	// ErrCorrupt: stored data (an entry, a cursor state, a queue's
	// metadata) is not what the backend writes: it cannot be read.
	ErrCorrupt = errors.New("queue: corrupt stored data")
)

// FullError details an ErrQueueFull.
type FullError struct {
	Queue          string
	Events, Bytes  int64 // depth when refused, including in-flight enqueues
	MaxEvents, Max int64 // limits (0 = none); Max is MaxBytes
	// HeldByWaiters: refused at once, not after FullWait: every producer
	// holding room in the queue was waiting for more, which only one of
	// them ending could free, and this was the youngest (specs/queues.md).
	HeldByWaiters bool
}

func (e *FullError) Error() string {
	msg := fmt.Sprintf("queue: queue %q full: %d events / %d bytes (max %d events / %d bytes)",
		e.Queue, e.Events, e.Bytes, e.MaxEvents, e.Max)
	if e.HeldByWaiters {
		msg += "; the room is held by producers waiting for more, this one the youngest"
	}
	return msg
}

// Is makes a FullError match ErrQueueFull.
func (e *FullError) Is(target error) bool { return target == ErrQueueFull }
