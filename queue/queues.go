package queue

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/flowrun/flowrun/tx"
)

// Queues is the runtime's view of a backend: it checks every argument once,
// so no backend writes anything for bad input. Safe for concurrent use.
type Queues struct {
	b Backend

	mu   sync.Mutex
	cfgs map[string]Config // cache of queue configs, for event checks
	// gen counts DeleteQueue's cache drops: a lookup caches what it read
	// from the backend only if none happened meanwhile (else a config read
	// just before a delete outlived it, into a queue created again).
	gen uint64
}

// New wraps a backend.
func New(b Backend) *Queues { return &Queues{b: b, cfgs: map[string]Config{}} }

// Backend returns the wrapped backend (for its own extras, e.g. stats).
func (q *Queues) Backend() Backend { return q.b }

// CreateQueue creates a queue with cfg (zero fields defaulted).
func (q *Queues) CreateQueue(name string, cfg Config) error {
	if err := CheckName("queue", name); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	return q.b.CreateQueue(name, cfg)
}

// DeleteQueue drops a queue and everything in it.
func (q *Queues) DeleteQueue(name string) error {
	if err := CheckName("queue", name); err != nil {
		return err
	}
	q.forget(name)
	err := q.b.DeleteQueue(name)
	q.forget(name) // a lookup may have cached it while the backend deleted
	return err
}

// forget drops name's cached config and makes lookups in flight drop what
// they read.
func (q *Queues) forget(name string) {
	q.mu.Lock()
	delete(q.cfgs, name)
	q.gen++
	q.mu.Unlock()
}

// TruncateQueue drops every committed entry.
func (q *Queues) TruncateQueue(name string) error {
	if err := CheckName("queue", name); err != nil {
		return err
	}
	return q.b.TruncateQueue(name)
}

// AddGroup adds a consumer group, which starts where the existing groups all
// are (Backend.AddGroup).
func (q *Queues) AddGroup(queue string, g Group) error {
	cfg, err := q.config(queue)
	if err != nil {
		return err
	}
	if err := g.Validate(cfg); err != nil {
		return err
	}
	return q.b.AddGroup(queue, g)
}

// RemoveGroup removes a consumer group; it no longer holds back eviction.
func (q *Queues) RemoveGroup(queue, group string) error {
	if err := CheckName("queue", queue); err != nil {
		return err
	}
	if err := CheckName("group", group); err != nil {
		return err
	}
	return q.b.RemoveGroup(queue, group)
}

// SetStrategy changes a group's strategy (Backend.SetStrategy).
func (q *Queues) SetStrategy(queue, group string, s Strategy) error {
	if _, err := q.config(queue); err != nil {
		return err
	}
	if err := CheckName("group", group); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	return q.b.SetStrategy(queue, group, s)
}

// Rescale sets a group's instance count; see the package doc for the handoff.
func (q *Queues) Rescale(queue, group string, instances int) error {
	cfg, err := q.config(queue)
	if err != nil {
		return err
	}
	if err := CheckName("group", group); err != nil {
		return err
	}
	if err := checkInstances(instances, cfg); err != nil {
		return err
	}
	return q.b.Rescale(queue, group, instances)
}

// Info describes one queue: depth and per-group lag.
func (q *Queues) Info(queue string) (QueueInfo, error) {
	if err := CheckName("queue", queue); err != nil {
		return QueueInfo{}, err
	}
	return q.b.Info(queue)
}

// List describes every queue.
func (q *Queues) List() ([]QueueInfo, error) { return q.b.Queues() }

// Scan reads entries without consuming them.
func (q *Queues) Scan(queue string, opts ScanOptions, fn func(Entry) bool) error {
	cfg, err := q.config(queue)
	if err != nil {
		return err
	}
	if err := CheckScanLimit(opts.Limit); err != nil {
		return err
	}
	for _, p := range opts.Partitions {
		if p < 0 || p >= cfg.Partitions {
			return fmt.Errorf("%w: partition %d not in [0, %d)", ErrBadConfig, p, cfg.Partitions)
		}
	}
	opts.Partitions = ScanPartitions(opts.Partitions)
	return q.b.Scan(queue, opts, fn)
}

// CheckScanLimit refuses a negative ScanOptions.Limit: it read as "no
// limit" (0's meaning), so a caller that computed it wrong scanned the
// whole queue.
func CheckScanLimit(limit int) error {
	if limit < 0 {
		return fmt.Errorf("%w: scan limit %d (0 = no limit)", ErrBadConfig, limit)
	}
	return nil
}

// ScanPartitions returns ScanOptions.Partitions sorted and without
// duplicates, in a new slice (nil stays nil: all partitions). A partition
// listed twice is scanned once, and entries come in partition order
// whatever the order of the list.
func ScanPartitions(ps []int) []int {
	if ps == nil {
		return nil
	}
	out := slices.Clone(ps)
	slices.Sort(out)
	return slices.Compact(out)
}

// Maintain runs eviction and space reclamation now.
func (q *Queues) Maintain() error { return q.b.Maintain() }

// Close closes the backend.
func (q *Queues) Close() error { return q.b.Close() }

func (q *Queues) config(queue string) (Config, error) {
	if err := CheckName("queue", queue); err != nil {
		return Config{}, err
	}
	q.mu.Lock()
	cfg, ok := q.cfgs[queue]
	gen := q.gen
	q.mu.Unlock()
	if ok {
		return cfg, nil
	}
	info, err := q.b.Info(queue)
	if err != nil {
		return Config{}, err
	}
	q.mu.Lock()
	if q.gen == gen {
		q.cfgs[queue] = info.Config
	}
	q.mu.Unlock()
	return info.Config, nil
}

// Producer is a transaction participant that enqueues into one queue. Add it
// to the tx.Context of every step that emits to the queue.
type Producer interface {
	tx.Participant
	Enqueue(ctx context.Context, ev Event) error
}

// Consumer is a transaction participant that dequeues for one instance of a
// group; its acknowledgements commit with the step's transaction.
type Consumer interface {
	tx.Participant
	Dequeue(max int) ([]Entry, error)
}

// Producer returns a producer for queue. If the backend's producer is a
// tx.Stager, so is the returned one (the single-store fast path stays on).
func (q *Queues) Producer(queue string) (Producer, error) {
	cfg, err := q.config(queue)
	if err != nil {
		return nil, err
	}
	d, err := q.b.Producer(queue)
	if err != nil {
		return nil, err
	}
	p := checkedProducer{ProducerDriver: d, queue: queue, max: cfg.MaxEventBytes, maxBytes: cfg.MaxBytes}
	if s, ok := d.(tx.Stager); ok {
		return stagingProducer{checkedProducer: p, s: s}, nil
	}
	return p, nil
}

// Consumer returns a consumer for one instance of a group.
func (q *Queues) Consumer(queue, group string, instance int) (Consumer, error) {
	if _, err := q.config(queue); err != nil {
		return nil, err
	}
	if err := CheckName("group", group); err != nil {
		return nil, err
	}
	if instance < 0 {
		return nil, fmt.Errorf("%w: instance %d", ErrUnknownInstance, instance)
	}
	return q.b.Consumer(queue, group, instance)
}

type checkedProducer struct {
	ProducerDriver
	queue    string
	max      int
	maxBytes int64 // the queue's MaxBytes (0 = none)
}

func (p checkedProducer) Enqueue(ctx context.Context, ev Event) error {
	n := ev.Size()
	if n > p.max {
		return fmt.Errorf("%w: %d bytes for queue %q (max %d)", ErrEventTooLarge, n, p.queue, p.max)
	}
	if err := CheckFits(p.queue, n, p.maxBytes); err != nil {
		return err
	}
	return p.ProducerDriver.Enqueue(ctx, ev)
}

// CheckFits returns ErrEventTooLarge for an event of size bytes that can
// never fit a queue whose depth is bounded by maxBytes (0 = unbounded),
// even empty: waiting for room (FullWait) is pointless.
func CheckFits(queue string, size int, maxBytes int64) error {
	if maxBytes > 0 && int64(size) > maxBytes {
		return fmt.Errorf("%w: %d bytes for queue %q, more than its MaxBytes %d (it can never fit)", ErrEventTooLarge, size, queue, maxBytes)
	}
	return nil
}

type stagingProducer struct {
	checkedProducer
	s tx.Stager
}

func (p stagingProducer) Store() any                               { return p.s.Store() }
func (p stagingProducer) Stage(dst []tx.Write) ([]tx.Write, error) { return p.s.Stage(dst) }
