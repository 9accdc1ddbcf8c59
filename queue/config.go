package queue

import (
	"fmt"
	"time"
)

// Defaults for Config.
const (
	DefaultPartitions    = 64
	MaxPartitions        = 4096
	DefaultMaxEventBytes = 1 << 20
	MaxInstances         = MaxPartitions
)

// Config is fixed when a queue is created.
type Config struct {
	// Partitions is the number of virtual partitions (default 64). It bounds
	// the parallelism of every group and never changes, so that a key always
	// maps to the same partition.
	Partitions int
	// TTL: entries older than this are skipped by consumers, counted as
	// expired and evicted. Zero keeps entries until every group consumed them.
	TTL time.Duration
	// MaxEvents and MaxBytes bound the depth (committed, not yet evicted
	// entries plus in-flight enqueues). Zero means unbounded.
	MaxEvents, MaxBytes int64
	// FullWait: when full, Enqueue waits up to this long for space before
	// returning ErrQueueFull. Zero fails at once.
	FullWait time.Duration
	// MaxEventBytes bounds one event's payload, key and headers (default 1 MiB).
	MaxEventBytes int
}

// WithDefaults fills zero fields.
func (c Config) WithDefaults() Config {
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.MaxEventBytes == 0 {
		c.MaxEventBytes = DefaultMaxEventBytes
	}
	return c
}

// Validate checks a defaulted Config.
func (c Config) Validate() error {
	switch {
	case c.Partitions < 1 || c.Partitions > MaxPartitions:
		return fmt.Errorf("%w: partitions %d not in [1, %d]", ErrBadConfig, c.Partitions, MaxPartitions)
	case c.TTL < 0 || c.MaxEvents < 0 || c.MaxBytes < 0 || c.FullWait < 0:
		return fmt.Errorf("%w: negative TTL, limit or wait", ErrBadConfig)
	case c.MaxEventBytes < 1:
		return fmt.Errorf("%w: max event bytes %d", ErrBadConfig, c.MaxEventBytes)
	}
	return nil
}

// Strategy says how a group's instances split the partitions.
type Strategy string

const (
	// FIFO: any instance takes the next free partition; no entry goes to two.
	FIFO Strategy = "fifo"
	// RoundRobin: partition p belongs to instance p % instances; producers
	// spread keyless events over the partitions.
	RoundRobin Strategy = "round_robin"
	// Hash: like RoundRobin; events with the same key share a partition and so
	// reach one instance, in order.
	Hash Strategy = "hash"
)

// Group is a consumer group: every group receives every event.
type Group struct {
	Name      string
	Strategy  Strategy
	Instances int
}

// Validate checks a group against its queue's config.
func (g Group) Validate(cfg Config) error {
	if err := CheckName("group", g.Name); err != nil {
		return err
	}
	if err := g.Strategy.Validate(); err != nil {
		return err
	}
	return checkInstances(g.Instances, cfg)
}

// Validate checks that s is a known strategy.
func (s Strategy) Validate() error {
	switch s {
	case FIFO, RoundRobin, Hash:
		return nil
	}
	return fmt.Errorf("%w: unknown strategy %q", ErrBadConfig, s)
}

func checkInstances(n int, cfg Config) error {
	if n < 1 || n > MaxInstances {
		return fmt.Errorf("%w: %d instances not in [1, %d]", ErrBadConfig, n, MaxInstances)
	}
	return nil
}
