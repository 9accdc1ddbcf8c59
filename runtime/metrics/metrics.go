package metrics

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/tx"
)

// Collector is a prometheus.Collector over one app.
type Collector struct {
	a      *runtime.App
	status func() runtime.Status

	processed, emitted, failed, dead, conflicts             *prometheus.Desc
	tooLarge                                                *prometheus.Desc
	instances, paused, backlog, dlq, rate                   *prometheus.Desc
	stepDur                                                 *prometheus.Desc
	txStarted, txCommits, txDeferred, txConflicts, txAborts *prometheus.Desc
	txInvalidated, txInProgress, txCommitDur                *prometheus.Desc
	txSyncs, txGathers, txGathersJoined                     *prometheus.Desc
	queuePending, queueEvents, queueBytes                   *prometheus.Desc
	ready, uptime                                           *prometheus.Desc
}

// New returns a collector for a. status gives the app's status (a cached
// one, since Status reads every queue's keys); nil means a.Status.
func New(a *runtime.App, status func() runtime.Status) *Collector {
	if status == nil {
		status = a.Status
	}
	app := prometheus.Labels{"app": a.Plan().App}
	fl := []string{"flowlet"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, app)
	}
	return &Collector{
		a: a, status: status,
		processed: d("flowrun_flowlet_processed_total", "Input events consumed by committed steps (for sources: events emitted by committed steps).", fl...),
		emitted:   d("flowrun_flowlet_emitted_total", "Events committed to the flowlet's output queues.", fl...),
		failed:    d("flowrun_flowlet_failed_total", "Failed attempts (errors and panics; each retry counts).", fl...),
		dead:      d("flowrun_flowlet_dead_lettered_total", "Entries this run wrote to the flowlet's dead-letter queue.", fl...),
		conflicts: d("flowrun_flowlet_conflicts_total", "Steps retried after a write conflict.", fl...),
		tooLarge:  d("flowrun_flowlet_too_large_total", "Steps the store refused whole as too large for one atomic write (redone with fewer events, or the event dead-lettered).", fl...),
		instances: d("flowrun_flowlet_instances", "Live instance count.", fl...),
		paused:    d("flowrun_flowlet_paused", "1 while the flowlet is paused.", fl...),
		backlog:   d("flowrun_flowlet_backlog", "Events in the flowlet's input queues it has not consumed.", fl...),
		dlq:       d("flowrun_flowlet_dlq_size", "Entries waiting in the flowlet's dead-letter queue.", fl...),
		rate:      d("flowrun_flowlet_events_per_second", "Processed events per second over the last second or so.", fl...),
		stepDur:   d("flowrun_step_duration_seconds", "Duration of committed steps, from the start of the attempt that committed to its commit.", fl...),

		txStarted:       d("flowrun_tx_started_total", "Transactions started."),
		txCommits:       d("flowrun_tx_commits_total", "Transactions committed."),
		txDeferred:      d("flowrun_tx_commits_deferred_total", "Commits made visible to later steps before their log sync (durable with a later sync; waited for before anything outside the store hears of them)."),
		txConflicts:     d("flowrun_tx_conflicts_total", "Commits refused for a write conflict."),
		txAborts:        d("flowrun_tx_aborts_total", "Transactions aborted (empty steps, failures, conflicts)."),
		txInvalidated:   d("flowrun_tx_invalidated_total", "Transactions invalidated (timed out or failed to roll back)."),
		txInProgress:    d("flowrun_tx_in_progress", "Transactions in progress."),
		txCommitDur:     d("flowrun_tx_commit_duration_seconds", "Commit latency: log sync included, except for deferred commits (until visible)."),
		txSyncs:         d("flowrun_tx_log_syncs_total", "Syncs of the transaction log, each shared by every commit it covered (group commit)."),
		txGathers:       d("flowrun_tx_log_gathers_total", "Log syncs held back briefly for transactions about to commit, to share one sync with them."),
		txGathersJoined: d("flowrun_tx_log_gathers_joined_total", "Of the gathered syncs, those some other commit joined."),

		queuePending: d("flowrun_queue_pending", "Stored events a consumer group has not consumed yet.", "queue", "group"),
		queueEvents:  d("flowrun_queue_events", "Committed entries stored in the queue (not yet evicted).", "queue"),
		queueBytes:   d("flowrun_queue_bytes", "Payload bytes stored in the queue.", "queue"),
		ready:        d("flowrun_ready", "1 when the app runs and every instance has started."),
		uptime:       d("flowrun_uptime_seconds", "Seconds since the app started running."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.processed, c.emitted, c.failed, c.dead, c.conflicts, c.tooLarge, c.instances, c.paused,
		c.backlog, c.dlq, c.rate, c.stepDur, c.txStarted, c.txCommits, c.txDeferred, c.txConflicts, c.txAborts, c.txInvalidated,
		c.txInProgress, c.txCommitDur, c.txSyncs, c.txGathers, c.txGathersJoined, c.queuePending, c.queueEvents, c.queueBytes, c.ready, c.uptime} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- constMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- constMetric(d, prometheus.GaugeValue, v, l...)
	}
	durs := c.a.StepDurations()
	for _, f := range st.Flowlets {
		counter(c.processed, f.Processed, f.Name)
		counter(c.emitted, f.Emitted, f.Name)
		counter(c.failed, f.Failed, f.Name)
		counter(c.dead, f.DeadLettered, f.Name)
		counter(c.conflicts, f.Conflicts, f.Name)
		counter(c.tooLarge, f.TooLarge, f.Name)
		gauge(c.instances, float64(f.Instances), f.Name)
		gauge(c.paused, b2f(f.Paused), f.Name)
		gauge(c.backlog, float64(f.Backlog), f.Name)
		gauge(c.dlq, float64(f.DLQ), f.Name)
		gauge(c.rate, f.Rate, f.Name)
		ch <- histogram(c.stepDur, durs[f.Name], f.Name)
	}
	ts := c.a.TxStats()
	counter(c.txStarted, ts.Started)
	counter(c.txCommits, ts.Committed)
	counter(c.txDeferred, ts.Deferred)
	counter(c.txConflicts, ts.Conflicts)
	counter(c.txAborts, ts.Aborted)
	counter(c.txInvalidated, ts.Invalidated)
	gauge(c.txInProgress, float64(ts.InProgress))
	counter(c.txSyncs, ts.LogSyncs)
	counter(c.txGathers, ts.LogGathers)
	counter(c.txGathersJoined, ts.LogGathersJoined)
	ch <- histogram(c.txCommitDur, ts.CommitLatency)
	for _, q := range st.Queues {
		gauge(c.queueEvents, float64(q.Events), q.Name)
		gauge(c.queueBytes, float64(q.Bytes), q.Name)
		for g, lag := range q.Lag {
			gauge(c.queuePending, float64(lag), q.Name, g)
		}
	}
	gauge(c.ready, b2f(st.Ready))
	gauge(c.uptime, st.Uptime)
}

// constMetric is prometheus.MustNewConstMetric, without the panic: for a
// label value prometheus refuses (not UTF-8) it is an invalid metric,
// failing the scrape with an error, where the panic ended the process.
func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// histogram turns a tx.Histogram (power-of-two microsecond buckets) into a
// Prometheus histogram in seconds, with cumulative bucket counts. tx's last
// bucket also holds every longer duration (observe clamps there), so it is
// only in +Inf (the count), not a finite bucket.
func histogram(d *prometheus.Desc, h tx.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Counts)-1)
	var cum uint64
	for i, n := range h.Counts[:len(h.Counts)-1] {
		cum += n
		buckets[h.BucketUpper(i).Seconds()] = cum
	}
	// A snapshot may have read an observation's bucket and not yet its
	// count: +Inf is never below a finite bucket.
	count := max(h.Count, cum+h.Counts[len(h.Counts)-1])
	m, err := prometheus.NewConstHistogram(d, count, h.Sum.Seconds(), buckets, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err) // as constMetric
	}
	return m
}

// Registry returns a registry with the app's collector and the Go runtime
// and process collectors.
func Registry(a *runtime.App, status func() runtime.Status) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(New(a, status), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves the registry in the Prometheus text (or negotiated) format.
// A metric that cannot be written (a label that is not UTF-8, from a damaged
// store's queue name) is left out and logged, and counted in
// promhttp_metric_handler_errors_total: the scrape answered 500 for it, and
// every other metric of the app went unseen with it.
func Handler(r *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r, ErrorHandling: promhttp.ContinueOnError, ErrorLog: scrapeLog{}})
}

// scrapeLog logs a scrape's errors to the default slog logger.
type scrapeLog struct{}

func (scrapeLog) Println(v ...any) { slog.Warn("metrics: " + fmt.Sprint(v...)) }
