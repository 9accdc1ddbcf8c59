package flowlet

import "time"

// Event is one input event as a flowlet sees it.
type Event struct {
	// ID identifies the event within its input queue; it is stable across
	// retries of the same input, so it can serve for de-duplication and logs.
	ID string
	// Input is the queue the event was read from, "<producer>.<output>".
	Input string
	// Payload is the event's data. It is only valid during the call that
	// receives it: copy it to keep it beyond the step.
	Payload []byte
	// Keys are the partition keys the producer set (see Key). Usually zero
	// or one; the queue's hash key, when it has one, is among them.
	Keys []KeyValue
	// EventTime is when the event happened, as set by the producer (EventTime
	// option); zero when unset.
	EventTime time.Time
	// TraceID links the event to a trace; empty when unset.
	TraceID string
}

// KeyValue is one named partition key.
type KeyValue struct {
	Name, Value string
}

// Key returns the value of the partition key name and whether it is set.
func (e *Event) Key(name string) (string, bool) {
	for _, kv := range e.Keys {
		if kv.Name == name {
			return kv.Value, true
		}
	}
	return "", false
}
