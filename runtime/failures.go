package runtime

import (
	"sync"
	"sync/atomic"
	"time"
)

// failureLog holds the failed attempts of a flowlet's events, shared by
// its instances: with fifo any instance may take an event another one
// failed, and the retry budget (retries.max + 1 attempts, then the
// dead-letter queue) and the backoff are the event's, not the instance's.
// The same holds for what is known of a failed batch (retried once,
// isolated) and of a dead-letter record too large to write. Whichever
// instance commits the event forgets it: a partition that moved to another
// instance (Scale, fifo) leaves nothing behind on the one that failed it.
// It is in memory: a restart counts afresh (specs/guarantees.md).
type failureLog struct {
	mu sync.Mutex
	m  map[string]*failure
	// n is len(m): steps skip the log (no lock per event) while no event
	// of the flowlet is failing, which is nearly always.
	n atomic.Int64
}

type failure struct {
	attempts int
	last     string    // the last attempt's error
	perm     bool      // failed with a permanent error: dead-letter at once
	retryAt  time.Time // not before: the backoff after the last attempt
	// batchFailed: a whole batch starting with this event failed and is
	// retried once as a batch; isolate: run it event by event (the event
	// was in a batch that failed again).
	batchFailed, isolate bool
	// truncDL: its dead-letter record was too large: store a truncated one.
	truncDL bool
}

func newFailureLog() *failureLog { return &failureLog{m: map[string]*failure{}} }

// add records a failed attempt of event id, whose retry waits backoff(n)
// for the n-th attempt, and returns n.
func (l *failureLog) add(id, errText string, backoff func(int) time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.entryLocked(id)
	f.attempts++
	f.last = errText
	f.retryAt = time.Now().Add(backoff(f.attempts))
	return f.attempts
}

// get returns what is known of event id (the zero failure if nothing).
func (l *failureLog) get(id string) failure {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.m[id]; f != nil {
		return *f
	}
	return failure{}
}

// setPerm marks event id to be dead-lettered at its next attempt.
func (l *failureLog) setPerm(id string, perm bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.m[id]; f != nil {
		f.perm = perm
	} else if perm {
		l.m[id] = &failure{perm: true}
		l.n.Add(1)
	}
}

// update changes event id's record, adding it if need be.
func (l *failureLog) update(id string, change func(*failure)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	change(l.entryLocked(id))
}

// entryLocked returns event id's record, adding an empty one if need be.
func (l *failureLog) entryLocked(id string) *failure {
	f := l.m[id]
	if f == nil {
		f = &failure{}
		l.m[id] = f
		l.n.Add(1)
	}
	return f
}

// empty reports whether no event is failing (without the lock).
func (l *failureLog) empty() bool { return l.n.Load() == 0 }

// forget drops event id once a step that consumed it committed.
func (l *failureLog) forget(id string) {
	l.mu.Lock()
	if _, ok := l.m[id]; ok {
		delete(l.m, id)
		l.n.Add(-1)
	}
	l.mu.Unlock()
}
