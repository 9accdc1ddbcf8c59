package runtime

import (
	"sync"
	"time"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// rateMeter measures events per second over windows of about a second.
type rateMeter struct {
	mu    sync.Mutex
	count uint64
	since time.Time
	last  float64
}

func (r *rateMeter) add(n int) {
	r.mu.Lock()
	if r.since.IsZero() {
		// The first window starts with the first events, not at the first
		// reading: counting events from before it over a shorter window
		// overstated the first rate (2× for a status read 8 s in).
		r.since = time.Now()
	}
	r.count += uint64(n)
	r.mu.Unlock()
}

// rate returns the rate of the last full window (at least 1s; the first
// window starts at the first add).
func (r *rateMeter) rate(now time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		return 0
	}
	if d := now.Sub(r.since); d >= time.Second {
		r.last = float64(r.count) / d.Seconds()
		r.count = 0
		r.since = now
	}
	return r.last
}

// Status is a point-in-time view of a running app, for the CLI's progress
// view and a status endpoint. Its JSON form is documented in specs/cli.md.
type Status struct {
	App     string    `json:"app"`
	DataDir string    `json:"data_dir"`
	Time    time.Time `json:"time"`
	Uptime  float64   `json:"uptime_seconds"`
	// Drained: every source reached the end of its input (none gave up on
	// an error) and every queue is empty.
	Drained bool `json:"drained"`
	// Ready: the app runs and every instance has started (GET /ready).
	Ready    bool            `json:"ready"`
	Flowlets []FlowletStatus `json:"flowlets"`
	Queues   []QueueStatus   `json:"queues"`
	Tx       TxStatus        `json:"tx"`
}

// FlowletStatus describes one flowlet (all its instances).
type FlowletStatus struct {
	Name string `json:"name"`
	// Type is the flowlet's type, or "plugin " and the plugin's path.
	Type string `json:"type"`
	// Instances is the live instance count (App.Scale changes it).
	Instances int  `json:"instances"`
	Source    bool `json:"source,omitempty"`
	Paused    bool `json:"paused"`
	// Parked: paused, and no instance is in a step or starts one until
	// resumed (the steps in flight when it was paused are done, their
	// commits durable; App.WaitPaused).
	Parked bool `json:"parked,omitempty"`
	// Busy: instances in a step or about to start one; the others wait for
	// input, a resume or back-pressure (or have stopped).
	Busy int `json:"busy"`
	// Inputs are the queues the flowlet consumes, Outputs the queues it
	// produces to (without its dead-letter and replay queues).
	Inputs  []string `json:"inputs,omitempty"`
	Outputs []string `json:"outputs,omitempty"`
	// Processed: input events consumed by committed steps (for sources:
	// events emitted by committed steps).
	Processed uint64 `json:"processed"`
	// Emitted: events committed to the flowlet's output queues.
	Emitted uint64 `json:"emitted"`
	// Failed: failed attempts (errors and panics; each retry counts).
	Failed uint64 `json:"failed"`
	// DeadLettered: entries this run wrote to the dead-letter queue.
	DeadLettered uint64 `json:"dead_lettered"`
	// Conflicts: steps retried after a write conflict.
	Conflicts uint64 `json:"conflicts"`
	// TooLarge: steps the store refused whole as too large for one atomic
	// write (each redone with fewer events, or its one event dead-lettered;
	// StepTooLargeError).
	TooLarge uint64 `json:"too_large,omitempty"`
	// Unrouted: events emitted on outputs without a connection (dropped).
	Unrouted uint64 `json:"unrouted,omitempty"`
	// Rate: Processed per second over the last second or so.
	Rate float64 `json:"events_per_second"`
	// Backlog: events in the flowlet's input queues it has not consumed.
	Backlog int64 `json:"backlog"`
	// DLQ: entries stored in the flowlet's dead-letter queue.
	DLQ int64 `json:"dlq"`
	// Done: source instances that ended (end of input or gave up).
	Done int `json:"done,omitempty"`
	// Throttled: times a source waited for its output queues' backlog to
	// fall under its max_backlog (back-pressure).
	Throttled uint64 `json:"throttled,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// QueueStatus is one queue's depth and per-group lag.
type QueueStatus struct {
	Name string `json:"name"`
	// Producer is the flowlet that writes the queue; Kind is "" for a
	// queue between flowlets, "dlq" for a dead-letter queue and "replay"
	// for the queue dead letters are replayed through.
	Producer string `json:"producer,omitempty"`
	Kind     string `json:"kind,omitempty"`
	// Partitions of the queue; Strategy of each consumer group.
	Partitions int               `json:"partitions,omitempty"`
	Strategy   map[string]string `json:"strategy,omitempty"`
	Events     int64             `json:"events"`
	Bytes      int64             `json:"bytes"`
	Lag        map[string]int64  `json:"lag,omitempty"` // by consumer group
}

// TxStatus is the coordinator's counters.
type TxStatus struct {
	Started   uint64 `json:"started"`
	Committed uint64 `json:"committed"`
	// Aborted counts transactions that aborted on a conflict, an error or
	// a stop; EmptySteps those of steps that found nothing to do (an idle
	// source's poll, an empty dequeue), which abort by design.
	Aborted     uint64 `json:"aborted"`
	EmptySteps  uint64 `json:"empty_steps"`
	ReadOnly    uint64 `json:"read_only"` // state and queue views, ended by an abort
	Conflicts   uint64 `json:"conflicts"`
	Invalidated uint64 `json:"invalidated"`
	InProgress  int    `json:"in_progress"`
	Invalid     int    `json:"invalid"`
	ReadPointer uint64 `json:"read_pointer"`
	// CommitP50/P99 are commit latencies in milliseconds (upper estimates).
	CommitP50 float64 `json:"commit_p50_ms"`
	CommitP99 float64 `json:"commit_p99_ms"`
}

func txStatus(s tx.Stats, empty, reads uint64) TxStatus {
	empty = min(empty, s.Aborted)
	reads = min(reads, s.Aborted-empty)
	return TxStatus{
		Started: s.Started, Committed: s.Committed, Aborted: s.Aborted - empty - reads, EmptySteps: empty, ReadOnly: reads, Conflicts: s.Conflicts,
		Invalidated: s.Invalidated, InProgress: s.InProgress, Invalid: s.Invalid, ReadPointer: s.ReadPointer,
		CommitP50: float64(s.CommitLatency.Quantile(0.5)) / 1e6, CommitP99: float64(s.CommitLatency.Quantile(0.99)) / 1e6,
	}
}

// queueInfos lists every queue for Status, as an inspection read (enter):
// the listing reads Badger, so a Status in progress (an HTTP request
// outlasting the server's shutdown) holds up the store's close, and one
// begun after lists none.
func (a *App) queueInfos() []queue.QueueInfo {
	exit, ok := a.queueRead()
	if !ok {
		return nil
	}
	defer exit()
	infos, _ := a.st.queues.List()
	return infos
}

// Status returns the app's status. It reads every queue's keys to count
// lag, so call it about once a second, not in a tight loop.
func (a *App) Status() Status {
	now := time.Now()
	// Before the stats: each is counted there first.
	empty, reads := a.emptySteps.Load(), a.st.reads.Load()
	s := Status{App: a.plan.App, DataDir: a.opts.DataDir, Time: now, Drained: a.drained.Load() && a.sourceErr.Load() == nil, Tx: txStatus(a.st.coord.Stats(), empty, reads)}
	s.Ready, _ = a.Ready()
	if t := a.started.Load(); t != nil {
		s.Uptime = now.Sub(*t).Seconds()
	}
	lag := map[string]int64{} // flowlet → backlog
	dlq := map[string]int64{}
	for _, q := range a.queueInfos() {
		qs := QueueStatus{Name: q.Name, Events: q.Events, Bytes: q.Bytes, Partitions: q.Config.Partitions}
		switch {
		case a.plan.Queue(q.Name) != nil:
			qs.Producer = a.plan.Queue(q.Name).Producer
		case isDLQ(q.Name):
			qs.Producer, qs.Kind = flowletOfQueue(q.Name), "dlq"
		case isReplay(q.Name):
			qs.Kind = "replay"
		}
		if len(q.Groups) > 0 {
			qs.Lag = map[string]int64{}
			qs.Strategy = map[string]string{}
		}
		for _, g := range q.Groups {
			qs.Lag[g.Name] = g.Lag
			qs.Strategy[g.Name] = string(g.Strategy)
			if q.Name != DLQName(g.Name) {
				lag[g.Name] += g.Lag
			}
		}
		s.Queues = append(s.Queues, qs)
		dlq[q.Name] = dlqSize(q)
	}
	for _, f := range a.flowlets {
		st := f.st
		st.errMu.Lock()
		lastErr := st.lastErr
		st.errMu.Unlock()
		// paused before busy: busy 0 then means parked (instance.activate).
		paused := f.paused.Load()
		busy := int(f.busy.Load())
		var outs []string
		for _, o := range f.fl.Outputs {
			outs = append(outs, planner.QueueName(f.fl.Name, o))
		}
		s.Flowlets = append(s.Flowlets, FlowletStatus{
			Name: f.fl.Name, Type: typeName(f.fl), Instances: int(f.n.Load()), Source: f.source,
			Paused: paused, Parked: paused && busy == 0, Busy: busy, Inputs: f.fl.Inputs, Outputs: outs,
			Processed: st.processed.Load(), Emitted: st.emitted.Load(), Failed: st.failed.Load(),
			DeadLettered: st.dead.Load(), Conflicts: st.conflicts.Load(), Unrouted: st.unrouted.Load(), TooLarge: st.tooLarge.Load(),
			Rate: f.rate.rate(now), Backlog: lag[f.fl.Name], DLQ: dlq[DLQName(f.fl.Name)],
			Done: int(st.done.Load()), Throttled: f.throttled.Load(), LastError: lastErr,
		})
	}
	return s
}
