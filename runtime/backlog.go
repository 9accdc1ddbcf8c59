package runtime

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/planner"
)

// Back-pressure: a source (a flowlet without inputs) does not run Generate
// while one of its output queues holds more than its max_backlog events
// that a consumer group has not consumed, so a fast reader cannot read a
// whole file into the queues ahead of slow consumers (memory and disk stay
// bounded by the bound, not by the input's size).
//
// The backlog is counted in memory: each queue's per-group lag is read from
// the store when the app opens, committed enqueues add to every group of
// the queue, committed dequeues subtract from the consuming group. While a
// source waits, the counts are re-read from the store every second, so
// anything the counts miss (TTL expiry, a replay) cannot stall it for good.
//
// The bound holds up to one step per instance of the source: an instance
// checks the counts before its Generate, so the instances that checked
// while the others' steps were in flight add one step each at most (a
// committed step is counted before its instance checks again). That needs
// the counts never to fall under the store's lags, which a sync could do
// if it ran between a commit and the count of that commit: reading a
// consumer's commit in the lags and then taking its events off again
// (consumed after the store), or overwriting the count of a producer's
// commit that the lags missed. So a commit and its counts happen under
// backlogMu held shared, and a sync reads and stores the lags holding it
// alone: every commit is either in both the lags and the counts it starts
// from, or in neither and counted after the sync. (A commit's count
// coming late only over-counts: it holds a source back a moment longer.)

// MaxBacklogKey is the config key of a source flowlet that sets its bound
// (an int; 0 = no bound). The runtime takes it out of the config the flowlet
// sees.
const MaxBacklogKey = "max_backlog"

// DefaultMaxBacklog is the bound of sources that do not set one (see
// Options.MaxBacklog).
const DefaultMaxBacklog = 50000

// backlogs are the consumer groups' lags of every queue of the plan.
type backlogs map[string]map[string]*atomic.Int64 // queue → group → lag

func (a *App) initBacklogs() error {
	b := backlogs{}
	for _, q := range a.plan.Queues {
		m := map[string]*atomic.Int64{}
		for _, g := range q.Groups {
			m[g.Name] = new(atomic.Int64)
		}
		b[q.Name] = m
	}
	a.backlog = b
	return a.syncBacklogs()
}

// syncBacklogs reads every group's lag from the store. No commit runs
// meanwhile (backlogMu): see above.
func (a *App) syncBacklogs() error {
	a.backlogMu.Lock()
	defer a.backlogMu.Unlock()
	infos, err := a.st.queues.List()
	if err != nil {
		return err
	}
	for _, q := range infos {
		m := a.backlog[q.Name]
		for _, g := range q.Groups {
			if c := m[g.Name]; c != nil {
				c.Store(g.Lag)
			}
		}
	}
	return nil
}

// commitCounted runs commit holding backlogMu shared and, if it succeeded,
// count, the commit's backlog counts (see above). The lock is released
// however they end: a panic in a commit (a participant, tx.Finish; Ingest
// runs in an HTTP handler, whose panics net/http recovers) must not leave
// it held, or the next syncBacklogs, and every commit after it, would wait
// for good.
func (a *App) commitCounted(commit func() error, count func()) error {
	a.backlogMu.RLock()
	defer a.backlogMu.RUnlock()
	if err := commit(); err != nil {
		return err
	}
	count()
	return nil
}

// produced counts n events committed to queue.
func (a *App) produced(queue string, n int) {
	for _, c := range a.backlog[queue] {
		c.Add(int64(n))
	}
}

// consumed counts n events of queue that group's committed step consumed.
func (a *App) consumed(queue, group string, n int) {
	if c := a.backlog[queue][group]; c != nil {
		c.Add(-int64(n))
	}
}

// outBacklog is the largest backlog of a flowlet's output queues.
func (a *App) outBacklog(f *planner.Flowlet) int64 {
	var worst int64
	for _, o := range f.Outputs {
		for _, c := range a.backlog[planner.QueueName(f.Name, o)] {
			worst = max(worst, c.Load())
		}
	}
	return worst
}

// maxBacklog takes a source's bound out of its config.
func (o *Options) maxBacklog(f *planner.Flowlet) (int64, map[string]any, error) {
	n, set, cfg, err := splitMaxBacklog(f.Name, f.Config)
	if err != nil || !set {
		return int64(o.MaxBacklog), cfg, err
	}
	return n, cfg, nil
}

// splitMaxBacklog reads the runtime's max_backlog out of a source's config
// and returns the rest, which is what the flowlet itself sees.
func splitMaxBacklog(name string, config map[string]any) (bound int64, set bool, rest map[string]any, err error) {
	if _, ok := config[MaxBacklogKey]; !ok {
		return 0, false, config, nil
	}
	n, err := flowlet.NewConfig(name, config).Int(MaxBacklogKey, 0)
	if err == nil && n < 0 {
		err = &flowlet.ConfigError{Flowlet: name, Field: MaxBacklogKey, Msg: fmt.Sprintf("want a whole number >= 0 (0: no bound), not %d", n)}
	}
	if err != nil {
		return 0, false, nil, err
	}
	rest = make(map[string]any, len(config))
	for k, x := range config {
		if k != MaxBacklogKey {
			rest[k] = x
		}
	}
	return int64(n), true, rest, nil
}

// waitBacklog returns once the source's output queues are under its bound:
// at once when they are, else (waited) after waiting, not busy
// (instance.deactivate). It returns !ok when the app stops or Scale removed
// the instance meanwhile.
func (in *instance) waitBacklog(ctx context.Context) (waited, ok bool) {
	bound := in.frt.maxBacklog
	if bound <= 0 || in.a.outBacklog(in.fl) <= bound {
		return false, true
	}
	in.frt.throttled.Add(1)
	in.settleBeforeWait()
	in.deactivate()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	synced := time.Now()
	for in.a.outBacklog(in.fl) > bound {
		select {
		case <-ctx.Done():
			return true, false
		case <-in.stop:
			return true, false
		case <-t.C:
		}
		if time.Since(synced) > time.Second {
			if err := in.a.syncBacklogs(); err != nil {
				in.logger.Warn("reading queue backlogs", "err", err)
			}
			synced = time.Now()
		}
	}
	return true, true
}
