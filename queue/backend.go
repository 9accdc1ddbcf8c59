package queue

import (
	"context"
	"time"

	"github.com/flowrun/flowrun/tx"
)

// Backend is the implementer's side, as database/sql/driver is to
// database/sql. Queues validates every argument before calling it (names,
// configs, event sizes, instance ranges), so a backend may assume valid
// input, but it must still return ErrUnknownQueue, ErrUnknownGroup,
// ErrUnknownInstance, ErrExists and ErrQueueFull where they apply.
// queuetest.Run checks the semantics.
type Backend interface {
	CreateQueue(name string, cfg Config) error
	// DeleteQueue drops the queue, its groups and all entries.
	DeleteQueue(name string) error
	// TruncateQueue drops every entry committed so far; groups stay.
	TruncateQueue(name string) error
	// AddGroup adds a consumer group. It starts where the queue's existing
	// groups all are: an event any of them has not consumed yet is the new
	// group's to consume, one all of them consumed is not (so a group that
	// replaces another, a renamed consumer, neither repeats nor skips). A
	// queue without groups starts it at the oldest stored entry.
	AddGroup(queue string, g Group) error
	RemoveGroup(queue, group string) error
	// Rescale changes a group's instance count while producers and consumers
	// keep running: no loss, no duplicate, per-key order kept.
	Rescale(queue, group string, instances int) error
	// SetStrategy changes which instance of a group reads which partition:
	// its cursors are per partition, so nothing is lost or repeated. What
	// the order of a key needs (its events in one partition) is the
	// producer's part.
	SetStrategy(queue, group string, s Strategy) error
	// Info describes one queue, Queues all of them, without consuming.
	Info(queue string) (QueueInfo, error)
	Queues() ([]QueueInfo, error)
	// Scan calls fn for committed entries, in (partition, priority desc,
	// entry id) order, until fn returns false.
	Scan(queue string, opts ScanOptions, fn func(Entry) bool) error
	Producer(queue string) (ProducerDriver, error)
	Consumer(queue, group string, instance int) (ConsumerDriver, error)
	// Maintain runs eviction and space reclamation now (they also run in the
	// background).
	Maintain() error
	Close() error
}

// ProducerDriver is a backend's producer: a transaction participant that
// buffers events and writes them when the transaction commits. A backend
// whose store can join the coordinator's atomic log also implements tx.Stager.
type ProducerDriver interface {
	tx.Participant
	// Enqueue buffers ev in the current transaction. It may wait (bounded by
	// ctx and the queue's FullWait) for space.
	Enqueue(ctx context.Context, ev Event) error
}

// ConsumerDriver is a backend's consumer for one group instance: a
// participant whose acknowledgements commit with the transaction.
type ConsumerDriver interface {
	tx.Participant
	// Dequeue returns up to max entries not yet consumed by the group, visible
	// to the current transaction. Calling it again in the same transaction
	// continues after what it returned.
	Dequeue(max int) ([]Entry, error)
}

// DequeueAppender is implemented by consumers (a ConsumerDriver, and so the
// Consumer that Queues returns for it) that can dequeue into the caller's
// slice. DequeueAppend is Dequeue, except that the entries (up to max) are
// appended to dst, and the extended slice is returned. A caller that takes
// the entries apart at once and reuses its slice from step to step (the
// runtime does) saves allocating and growing one slice of entries per
// Dequeue. The entries' byte slices are the caller's, as with Dequeue: only
// the slice of entries is reused.
type DequeueAppender interface {
	DequeueAppend(dst []Entry, max int) ([]Entry, error)
}

// Notifier is implemented by consumers (a ConsumerDriver, and so the
// Consumer that Queues returns for it) that can say when to look again
// instead of being polled.
//
// Ready returns a channel that is closed when entries may have become
// visible to the consumer's next transaction: at the latest once a producer
// transaction that wrote to the queue has committed (Finish returned), or a
// partition the consumer found held by another transaction is released or
// that transaction ended without releasing it (timed out), and also when
// the consumer may get an error instead (queue or group removed, backend
// closed). Take the channel before the Dequeue whose empty result
// makes you wait: a commit in between has closed it already, so no wake-up
// is lost. Wake-ups may be spurious (another instance's partition, another
// group's consumer took the entries): dequeue again and wait on a new
// channel.
type Notifier interface {
	Ready() <-chan struct{}
}

// GenNotifier is a Notifier that counts its wake-ups, so that a consumer
// that is busy pays for no channel (nor the lock that hands it out) per
// transaction: it takes the generation, an atomic load, before each
// transaction, and a channel only when its Dequeue came back empty:
//
//	g := n.Gen()                 // before the transaction
//	ctx.Start(...); es, _ := c.Dequeue(max)
//	if len(es) == 0 { ctx.Abort(nil); <-n.ReadyAt(g) }
//
// Gen changes at every wake-up a Ready channel taken at the same moment
// would get. ReadyAt(g) returns a channel closed at the first wake-up after
// Gen returned g, closed already if there was one: a commit between Gen
// and the Dequeue is not lost.
type GenNotifier interface {
	Notifier
	Gen() uint64
	ReadyAt(gen uint64) <-chan struct{}
}

// QueueInfo describes a queue at one moment.
type QueueInfo struct {
	Name   string
	Config Config
	// Depth: committed entries not yet evicted (on the general path also
	// those a producer persisted and has not committed or rolled back yet),
	// counted in the same read as the groups' Lag: no group's Lag is above
	// Events.
	Events, Bytes int64
	// Expired counts events dropped by TTL (skipped by a group or evicted
	// before a group read them) since the backend opened.
	Expired int64
	Groups  []GroupInfo
}

// GroupInfo is one consumer group and how far behind it is.
type GroupInfo struct {
	Group
	// Lag: stored events the group has not consumed yet.
	Lag int64
	// Consumed and Expired count the events the group's committed
	// transactions delivered or skipped for TTL, since the group was added.
	Consumed, Expired int64
}

// ScanOptions select entries for Scan. Zero values select everything.
type ScanOptions struct {
	// Partitions to read, each once, in partition order whatever the
	// order or repeats of the list; nil means all.
	Partitions []int
	// From and To bound entry ids by producer write pointer, inclusive
	// (To 0 = no bound).
	From, To uint64
	// Since and Until bound the enqueue time, inclusive at the millisecond
	// (zero = no bound).
	Since, Until time.Time
	// Limit stops after that many entries (0 = no limit; negative:
	// ErrBadConfig).
	Limit int
	// Tx, when set, shows only entries visible to it. Without it a scan
	// shows what is stored, which on the single-store fast path is exactly
	// what committed.
	Tx *tx.Tx
}
