// Package runtime runs a Plan: it opens the app's store, keeps its queues
// and consumer groups in line with the plan, and drives every flowlet
// instance through steps, each one transaction that commits or leaves no
// trace.
//
//	import _ "github.com/flowrun/flowrun/runtime/builtin" // file_source, file_sink, ...
//
//	plan, err := runtime.ParseFile("app.yaml") // planner.ParseFile against the registered types
//	if err != nil { ... }
//	app, err := runtime.Open(plan, runtime.Options{DataDir: "/var/lib/myapp"})
//	if err != nil { ... }
//	defer app.Close()
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
//	defer stop()
//	err = app.Run(ctx) // until ctx ends; with Options.Drain, until the input is used up
//
// Open opens one Badger DB holding the tx log, the queues (badgerq) and the
// flowlets' state (internal/state), creates missing queues and groups,
// rescales groups whose instance count changed, starts the processes of
// plugin flowlets (internal/pluginhost, building them if need be), and
// creates and Inits every instance. Nothing runs until Run, which may be called once; call Close
// after it. runtime/cli is this, plus flags, the HTTP server and signals.
//
// # The step loop
//
// Each instance is driven by a goroutine of its own, in a loop of steps:
//
//	start a transaction (Options.StepTimeout)
//	dequeue up to batch_size events, round-robin over its inputs and its DLQ replay queue
//	Process each event (with a savepoint) or ProcessBatch them all
//	emits, dead letters and state writes are staged in the step's Context
//	commit: dequeue cursors, state, emits and the commit record in one atomic Badger write
//
// A source runs Generate in the same kind of step; a ticker's Tick and a
// Publisher's Publish run in steps of their own. An idle instance does not
// poll: it waits for its queues' wake-ups (queue.Notifier), its tick, or,
// for a source that returned flowlet.ErrIdle, Options.IdleWait or its
// Waker's Ready; a Poller (a followed file) is asked every IdleWait whether
// its input changed, and stepped only when it did. The background work of
// an idle app parks too (the queue backend's writeback, the coordinator's
// expiry sweeper; eviction reads nothing where nothing was consumed): what
// is left is Badger's compactor ticks.
//
// A conflict redoes the step at once. A failed event aborts the step, which
// is retried after the flowlet's retries.backoff (doubled up to
// retries.max_backoff); once the event has failed retries.max + 1 times, or
// at once for a flowlet.IsPermanent error, it goes to the flowlet's
// dead-letter queue (DLQName) in the step that consumes it. A failed
// ProcessBatch is retried whole once (unless the error is permanent), then
// event by event.
// A step too large for one write is redone with half the batch
// (StepTooLargeError), and so is one that outlived Options.StepTimeout: a
// step of one event that does is that event's failure. A panic is an error
// (PanicError). specs/guarantees.md states exactly what holds.
//
// # Deferred commits
//
// By default a step's commit is durable before the next step sees it. With
// Options.DeferCommits (flowrun run --defer-commits) it is visible to the
// next steps before the store's sync (tx.Context.FinishDeferred): the
// instance goes on while the disk catches up, and later commits share the
// sync. An instance runs at most eight commits ahead of the disk and settles
// them before it idles, blocks or stops.
// Instances whose commits have effects outside the store (a StepObserver,
// a Publisher) commit with Finish: nothing leaves the app before it is
// durable. What a power loss can undo then: specs/guarantees.md.
// Options.NoSync drops the syncs: kill -9 loses nothing, a power loss may.
//
// # Sources and sinks
//
// Besides the flowlet interfaces, the runtime recognizes, structurally,
// StepObserver (told of each commit and abort), Publisher (publishes
// committed output after each step that consumed input), Waker, Poller,
// Ingester (App.Ingest, the HTTP API's ingest), StepSplitter (a source
// step redone with less input), StopDrainer (a source whose read-ahead
// commits on a graceful stop) and BatchBorrower; a step's Context also implements
// DeadLetterer and EventDeadLetterer. runtime/builtin uses them.
//
// # Operating a running app
//
//   - Scale changes a flowlet's instance count while events flow: partitions
//     move to their new owners at the last committed cursor. Pause and
//     Resume stop and restart a flowlet's steps.
//   - Back-pressure: a source does not Generate while an output queue holds
//     more than its max_backlog (MaxBacklogKey, Options.MaxBacklog,
//     DefaultMaxBacklog) unconsumed events, so memory and disk stay bounded
//     by the bound, not by the input.
//   - ApplyMemoryLimit sets the process's soft memory limit; the default,
//     DefaultMemoryLimit, is the store's memory budget plus
//     AppMemoryAllowance.
//   - Options.MinFreeDisk keeps free space on the store's file system: Open
//     refuses to start under it, and Run stops with ErrDiskSpace when it
//     falls under it, before a full disk can crash Badger's writes.
//   - Status, StepDurations, TxStats and Ready feed runtime/metrics
//     (Prometheus) and runtime/httpapi (JSON API, health, web UI).
//
// # Inspection
//
// Store reads a stopped app's store (OpenStore; ErrLocked while the app
// runs) or, through App.Inspect, a running one's: queues and their entries,
// dead letters and their replay (ReplayDeadLetters), state tables (View).
// The CLI's state, queue and dlq commands and the weblog exporter use it.
package runtime
