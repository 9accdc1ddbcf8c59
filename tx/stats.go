package tx

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Stats is a point-in-time view of the coordinator, for metrics. Counters
// start at Open; Started counts the transactions recovered in progress at
// Open too, so that Started = Committed + Aborted + Invalidated + InProgress.
type Stats struct {
	Started, Committed, Aborted, Conflicts, Invalidated, TimedOut uint64
	// Deferred counts commits made visible before their log sync
	// (CommitWithDeferred, Context.FinishDeferred), of Committed.
	Deferred uint64
	// Prunes counts invalid-list prunes.
	Prunes uint64
	// InProgress and Invalid are the current sizes of those sets.
	InProgress, Invalid int
	// ConflictKeys is the number of committed change keys kept for conflict
	// detection (bounded by pruning below the oldest in-progress transaction).
	ConflictKeys int
	ReadPointer  uint64
	NextPointer  uint64
	// LogSyncs counts the group syncs a durable log ran for waiting commits
	// (each shared by every commit it covered: Committed ÷ LogSyncs is about
	// the group size; the syncs Close runs, a FileLog's at a segment roll
	// and a BadgerLog's at memtable rotation are not counted).
	LogSyncs uint64
	// LogGathers counts syncs a BadgerLog held back for transactions about to
	// commit; LogGathersJoined those that some commit joined.
	LogGathers, LogGathersJoined uint64
	// CommitLatency is the distribution of Commit durations, log sync
	// included (for deferred commits: until visible, without the sync).
	CommitLatency Histogram
}

// syncCounter is a log that counts its syncs and gathers.
type syncCounter interface {
	syncCounts() (syncs, gathers, joined uint64)
}

// Histogram counts durations in power-of-two microsecond buckets:
// Counts[i] holds durations in [2^(i-1), 2^i) µs, Counts[0] those under 1 µs.
type Histogram struct {
	Counts [histBuckets]uint64
	Count  uint64
	Sum    time.Duration
}

const histBuckets = 32

// BucketUpper returns the exclusive upper bound of bucket i.
func (Histogram) BucketUpper(i int) time.Duration {
	return time.Duration(uint64(1)<<uint(i)) * time.Microsecond
}

// Quantile returns an upper estimate of the q-quantile (0 < q <= 1).
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 {
		return 0
	}
	want := uint64(q*float64(h.Count) + 0.5)
	if want == 0 {
		want = 1
	}
	var seen uint64
	for i, n := range h.Counts {
		seen += n
		if seen >= want {
			return h.BucketUpper(i)
		}
	}
	return h.BucketUpper(histBuckets - 1)
}

// histogram is the lock-free recorder behind Histogram.
type histogram struct {
	counts [histBuckets]atomic.Uint64
	count  atomic.Uint64
	sum    atomic.Int64
}

func (h *histogram) observe(d time.Duration) {
	us := uint64(d / time.Microsecond)
	i := bits.Len64(us)
	if i >= histBuckets {
		i = histBuckets - 1
	}
	h.counts[i].Add(1)
	h.count.Add(1)
	h.sum.Add(int64(d))
}

func (h *histogram) snapshot() Histogram {
	var out Histogram
	for i := range h.counts {
		out.Counts[i] = h.counts[i].Load()
	}
	out.Count = h.count.Load()
	out.Sum = time.Duration(h.sum.Load())
	return out
}

// Stats returns the coordinator's counters and sizes.
func (c *Coordinator) Stats() Stats {
	c.mu.Lock()
	s := Stats{
		Started:      c.stats.started,
		Committed:    c.stats.committed,
		Deferred:     c.deferredCommits.Load(),
		Aborted:      c.stats.aborted,
		Conflicts:    c.stats.conflicts,
		Invalidated:  c.stats.invalidated,
		TimedOut:     c.stats.timedOut,
		Prunes:       c.stats.pruned,
		InProgress:   len(c.inProgress),
		Invalid:      len(c.invalid.ids),
		ConflictKeys: c.conflicts.size(),
		ReadPointer:  c.readPointer,
		NextPointer:  c.nextPointer,
	}
	c.mu.Unlock()
	s.CommitLatency = c.latency.snapshot()
	if ls, ok := c.log.(syncCounter); ok {
		s.LogSyncs, s.LogGathers, s.LogGathersJoined = ls.syncCounts()
	}
	return s
}
