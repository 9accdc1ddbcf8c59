package queue

import (
	"fmt"
	"time"
)

// Event is what a producer enqueues.
type Event struct {
	Payload []byte
	// Key, when set, picks the partition: hash groups see a key's events on
	// one instance, in order (per priority).
	Key []byte
	// Priority: within a partition, higher priorities are dequeued first.
	Priority uint8
	// EventTime and TraceID are optional headers carried unchanged.
	EventTime time.Time
	TraceID   string
}

// Size is what counts against MaxEventBytes and depth limits.
func (e *Event) Size() int { return len(e.Payload) + len(e.Key) + len(e.TraceID) }

// EntryID names one committed event. Within a partition and priority, entries
// are ordered by (Pointer, Chunk, Index): Pointer is the producing
// transaction's write pointer, Chunk numbers the packed values that
// transaction wrote there, Index the event inside its chunk.
type EntryID struct {
	Partition int
	Priority  uint8
	Pointer   uint64
	Chunk     uint32
	Index     uint32
}

func (id EntryID) String() string {
	return fmt.Sprintf("%d/%d/%d.%d.%d", id.Partition, id.Priority, id.Pointer, id.Chunk, id.Index)
}

// Entry is a dequeued or scanned event.
type Entry struct {
	ID EntryID
	Event
	// Enqueued is when the producing transaction handed over its writes
	// (millisecond precision).
	Enqueued time.Time
}
