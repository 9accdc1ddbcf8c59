package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/pluginhost"
	"github.com/flowrun/flowrun/internal/state"
	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/tx"
)

// Options configure an App. The zero value is usable.
type Options struct {
	// DataDir is the app's store (default DefaultDataDir(plan.App)).
	DataDir string
	// NoSync leaves syncing to the OS: a commit survives kill -9 but not a
	// power loss. The default syncs every commit (Badger groups concurrent
	// commits into one sync).
	NoSync bool
	// DeferCommits lets steps commit deferred (runtime/deferred.go): a
	// step's commit is visible to the next steps before its sync, which
	// later commits share. Nothing outside the app hears of a step before
	// it is durable, but a power loss can undo the app's last steps, and in
	// rare cases (specs/guarantees.md) keep a step whose input it undid.
	// Off: every step is durable before the next one sees it.
	DeferCommits bool
	// Logger gets the runtime's logs (default: discard).
	Logger *slog.Logger
	// Drain makes Run return once every source has ended (ErrEndOfInput),
	// every queue is empty and no step is in flight; tickers get one last
	// tick first.
	Drain bool
	// StepTimeout bounds one step's transaction (default 1m).
	StepTimeout time.Duration
	// IdleWait is how long a source that returned ErrIdle waits before it is
	// called again, unless it signals readiness earlier (default 100ms).
	IdleWait time.Duration
	// GCInterval is how often state GC runs (default 10s); MaintainInterval
	// how often queue maintenance (compaction, value-log GC) runs (default
	// 1m). Eviction of consumed queue entries runs every 200ms regardless.
	GCInterval, MaintainInterval time.Duration

	// AppDir is the directory a relative `plugin:` path is relative to
	// (default: the directory of the app file the plan was parsed from).
	AppDir string
	// PluginCacheDir is where plugin package directories are built
	// (default: PluginCacheDir).
	PluginCacheDir string
	// PluginCallTimeout bounds every call into a plugin process; a plugin
	// that exceeds it is killed and the step aborts (default: half of
	// StepTimeout, so that the step still has time to abort or retry).
	PluginCallTimeout time.Duration
	// PluginStartTimeout bounds a plugin process's start and handshake
	// (default 30s).
	PluginStartTimeout time.Duration
	// MaxBacklog is the back-pressure bound of sources that do not set
	// max_backlog in their config: a source does not generate while one of
	// its output queues has more unconsumed events than this (default
	// DefaultMaxBacklog; negative: no bound).
	MaxBacklog int
	// MinFreeDisk is the free space kept on the store's file system: Open
	// refuses to start under it and a running app stops with ErrDiskSpace
	// when it falls under it (diskspace.go). 0: DefaultMinFreeDisk, or a
	// twentieth of a smaller file system (at least 16 MiB); negative: no
	// check.
	MinFreeDisk int64
}

func (o *Options) withDefaults(app string) {
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir(app)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.StepTimeout <= 0 {
		o.StepTimeout = time.Minute
	}
	if o.PluginCallTimeout <= 0 {
		o.PluginCallTimeout = o.StepTimeout / 2
	}
	if o.IdleWait <= 0 {
		o.IdleWait = 100 * time.Millisecond
	}
	if o.GCInterval <= 0 {
		o.GCInterval = 10 * time.Second
	}
	if o.MaintainInterval <= 0 {
		o.MaintainInterval = time.Minute
	}
	switch {
	case o.MaxBacklog == 0:
		o.MaxBacklog = DefaultMaxBacklog
	case o.MaxBacklog < 0:
		o.MaxBacklog = 0
	}
}

// Reserved output names: a flowlet's dead-letter queue is "<flowlet>.dlq" and
// the queue DLQ replay feeds it from is "<flowlet>.dlq-replay".
const (
	DLQOutput    = "dlq"
	ReplayOutput = "dlq-replay"
)

// DLQName is the name of a flowlet's dead-letter queue.
func DLQName(flowletName string) string { return planner.QueueName(flowletName, DLQOutput) }

// ReplayName is the name of the queue `dlq replay` moves dead letters to.
func ReplayName(flowletName string) string { return planner.QueueName(flowletName, ReplayOutput) }

// MaxPayload is the largest event payload a flowlet may emit (1 MiB); the
// queues leave room above it for the envelope and keys.
const MaxPayload = 1 << 20

const (
	eventMaxBytes    = MaxPayload + 4<<10
	dlqMaxEventBytes = MaxPayload + maxErrorBytes + 64<<10
)

// App is a Plan running (or ready to run) in this process on one store.
type App struct {
	plan *planner.Plan
	opts Options
	log  *slog.Logger
	st   *store

	// instMu guards instances and every flowletRT's insts (Scale changes
	// them while the app runs); scaleMu serializes Scale (and a scale-down
	// completing in the background), Run's start and stop and drain's last
	// ticks.
	instMu    sync.Mutex
	scaleMu   ctxMutex
	instances []*instance
	flowlets  []*flowletRT
	byName    map[string]*flowletRT
	fastPath  bool

	gcStores []*state.Store
	wm       *state.Watermark

	sourcesLeft atomic.Int64
	unsettled   atomic.Int64 // instances not started yet or waiting to retry
	sourceErr   atomic.Pointer[error]
	// emptySteps counts steps that found nothing to do (an idle source's
	// poll, an empty dequeue) and so aborted their transaction.
	emptySteps atomic.Uint64
	drained    atomic.Bool
	fatal      chan error
	// diskStop: the run stops on a nearly full disk (watchDiskSpace), and
	// the stop writes only what it must: no publish, a StopDrainer's last
	// steps only with room (diskRoomAtStop).
	diskStop atomic.Bool

	// started is when Run started (nil before): Status may be called from
	// the HTTP server while Run starts.
	started atomic.Pointer[time.Time]
	closed  bool
	ran     bool

	// commitFault, set by tests only, fails a step's commit with its error
	// (the step is aborted, as the store refusing it would).
	commitFault func(*stepCtx) error
	// afterCommit, set by tests only, runs after a step's commit, before
	// the backlog counts are updated.
	afterCommit func(*instance)

	// While Run runs: its context, stop function and the drivers' wait group
	// (Scale starts and stops drivers).
	runCtx  context.Context
	runStop context.CancelFunc
	runWG   sync.WaitGroup
	running atomic.Bool
	// ended: Run returned or the app closed; what changes how it runs
	// (Pause, Resume) is refused with ErrNotRunning from then on.
	ended atomic.Bool
	// pauseMu serializes Pause, Resume and the stop's refusal of ingests
	// (refuseIngest), so that a source refuses as the last of them says.
	pauseMu sync.Mutex

	adminMu sync.Mutex // serializes dead-letter listing and replay

	// plugins are the opened plugins of plugin flowlets, by flowlet name;
	// closed after the instances.
	plugins map[string]*pluginhost.Plugin
	// backlog: every plan queue's per-group lag, for back-pressure.
	backlog backlogs
	// backlogMu makes a commit and the backlog counts it changes one step
	// for syncBacklogs (backlog.go): commits hold it shared, a sync alone.
	backlogMu sync.RWMutex
}

// flowletRT is what the instances of one flowlet share.
type flowletRT struct {
	fails  *failureLog // its events' failed attempts, across instances
	fl     *planner.Flowlet
	typ    flowlet.Type
	st     *flowletStats
	rate   rateMeter
	source bool
	hist   stepHist

	// n is the live instance count (fl.Instances until Scale changes it);
	// insts the instances (under App.instMu).
	n     atomic.Int32
	insts []*instance
	// paused: the instances start no new step until resumed.
	paused atomic.Bool
	resume *signal
	// busy counts the instances that may be in a step: not waiting for
	// input, a resume or back-pressure, nor stopped (instance.activate).
	// parked is notified when it falls to 0 while paused, and on Resume.
	busy   atomic.Int32
	parked *signal
	// cfg is the config the instances' Init gets; maxBacklog a source's
	// back-pressure bound (0: none), throttled how often it waited.
	cfg        map[string]any
	maxBacklog int64
	throttled  atomic.Uint64
}

type flowletStats struct {
	processed, emitted, failed, dead, conflicts, unrouted, steps atomic.Uint64
	tooLarge                                                     atomic.Uint64 // steps refused as too large
	done                                                         atomic.Int64  // source instances that ended
	errMu                                                        sync.Mutex
	lastErr                                                      string
}

func (s *flowletStats) setErr(err error) {
	s.errMu.Lock()
	s.lastErr = err.Error()
	s.errMu.Unlock()
}

// PlannerTypes is the planner's view of every registered flowlet type.
func PlannerTypes() map[string]planner.TypeInfo {
	m := map[string]planner.TypeInfo{}
	for _, t := range flowlet.Types() {
		f := t.New()
		_, ticks := f.(flowlet.Ticker)
		ti := planner.TypeInfo{Outputs: t.Info.Outputs, Source: t.Info.Source, Sink: t.Info.Sink, SingleInstance: t.Info.SingleInstance, NoTick: !ticks}
		if _, ok := f.(flowlet.ConfigChecker); ok {
			ti.CheckConfig = checkConfigOf(t)
		}
		m[t.Name] = ti
	}
	return m
}

// checkConfigOf runs a type's flowlet.ConfigChecker on a fresh instance, for
// the planner. A panic is the type's bug, and is reported as an error of
// that flowlet rather than crash validate.
func checkConfigOf(t flowlet.Type) func(string, int, map[string]any) error {
	return func(name string, instances int, config map[string]any) error {
		if t.Info.Source {
			_, _, rest, err := splitMaxBacklog(name, config)
			if err != nil {
				return err
			}
			config = rest
		}
		cc := t.New().(flowlet.ConfigChecker)
		ic := flowlet.InitContext{Name: name, Instances: instances, Config: flowlet.NewConfig(name, config), Logger: slog.New(slog.DiscardHandler)}
		err := safeCall(func() error { return cc.CheckConfig(ic) })
		if pe := (*PanicError)(nil); errors.As(err, &pe) {
			return fmt.Errorf("flowlet %q: checking its config: %w", name, err)
		}
		return err
	}
}

// ParseFile plans an app file against the registered flowlet types.
func ParseFile(path string) (*planner.Plan, error) {
	return planner.ParseFile(path, planner.Options{Types: PlannerTypes()})
}

// Open opens the app's store, creates or updates its queues and consumer
// groups, and creates and initializes every flowlet instance. Nothing runs
// until Run.
func Open(plan *planner.Plan, opts Options) (*App, error) {
	return OpenContext(context.Background(), plan, opts)
}

// OpenContext is Open with a context for what Open waits on: building and
// starting plugins (a cancelled context stops a build, compilers included).
func OpenContext(ctx context.Context, plan *planner.Plan, opts Options) (*App, error) {
	opts.withDefaults(plan.App)
	a := &App{plan: plan, opts: opts, log: opts.Logger.With("app", plan.App), byName: map[string]*flowletRT{}, fatal: make(chan error, 1)}
	if err := a.checkPlan(); err != nil {
		return nil, err
	}
	if HasPlugins(plan) {
		ps, err := openPlugins(ctx, plan, opts, a.log)
		if err != nil {
			return nil, err
		}
		a.plugins = ps
	}
	st, err := openStore(opts.DataDir, storeOptions{durable: !opts.NoSync, log: a.log, minFreeDisk: opts.MinFreeDisk})
	if err != nil {
		a.closePlugins()
		return nil, err
	}
	a.st = st
	a.wm = state.NewWatermark(st.coord)
	if err := a.reconcile(); err != nil {
		a.st.close()
		a.closePlugins()
		return nil, err
	}
	if err := a.initBacklogs(); err != nil {
		a.st.close()
		a.closePlugins()
		return nil, err
	}
	if err := a.build(); err != nil {
		a.closeFlowlets()
		a.closePlugins()
		a.st.close()
		return nil, err
	}
	return a, nil
}

func (a *App) checkPlan() error {
	var errs []error
	for _, f := range a.plan.Flowlets {
		if f.Plugin == "" {
			if _, ok := flowlet.Lookup(f.Type); !ok {
				errs = append(errs, fmt.Errorf("flowlet %q: unknown flowlet type %q", f.Name, f.Type))
			}
		}
		for _, o := range f.Outputs {
			if o == DLQOutput || o == ReplayOutput {
				errs = append(errs, fmt.Errorf("flowlet %q: output name %q is reserved for the dead-letter queue", f.Name, o))
			}
		}
	}
	return errors.Join(errs...)
}

// build creates every instance (the flowlet value, its Init, its store, its
// consumers and producers).
func (a *App) build() error {
	a.fastPath = true
	for _, f := range a.plan.Flowlets {
		typ, _ := flowlet.Lookup(f.Type)
		if p := a.plugins[f.Name]; p != nil {
			typ = p.Type()
		}
		frt := &flowletRT{fl: f, typ: typ, st: &flowletStats{}, source: len(f.Inputs) == 0 && typ.Info.Source, resume: newSignal(), parked: newSignal(), fails: newFailureLog()}
		frt.n.Store(int32(f.Instances))
		frt.cfg = f.Config
		if frt.source {
			var err error
			if frt.maxBacklog, frt.cfg, err = a.opts.maxBacklog(f); err != nil {
				return err
			}
		}
		a.flowlets = append(a.flowlets, frt)
		a.byName[f.Name] = frt
		gcs, err := state.Open(a.st.db, a.plan.App, f.Name)
		if err != nil {
			return err
		}
		a.gcStores = append(a.gcStores, gcs)
		for i := range f.Instances {
			in, err := a.newInstance(frt, i)
			if err != nil {
				return err
			}
			if in.pub != nil {
				// Busy until Run started it and it parked or stepped: its
				// start runs a Publish step, paused or not, so a flowlet
				// paused before Run is not parked (WaitPaused, Status)
				// until that step is done. Other flowlets run no step
				// before they look at the pause (waitUnpaused).
				in.activate()
			}
			a.instances = append(a.instances, in)
			frt.insts = append(frt.insts, in)
			if frt.source {
				a.sourcesLeft.Add(1)
			}
		}
	}
	return nil
}

// FastPath reports whether every step of every instance takes the
// single-store fast path (all participants stage into the tx log's DB):
// true once the app is built, which refuses any other participant.
func (a *App) FastPath() bool { return a.fastPath }

// TxStats returns the coordinator's counters.
func (a *App) TxStats() tx.Stats { return a.st.coord.Stats() }

// Plan returns the plan the app runs.
func (a *App) Plan() *planner.Plan { return a.plan }

// DataDir returns the app's store directory.
func (a *App) DataDir() string { return a.opts.DataDir }

// Run runs every instance until ctx is cancelled (SIGINT/SIGTERM in the CLI)
// or, with Options.Drain, until the app has drained. In-flight steps commit
// or abort before Run returns. It returns an error when the store failed or,
// after a drain, when a source stopped on an error. Run may be called once.
func (a *App) Run(ctx context.Context) error {
	if a.ran {
		return errors.New("runtime: Run called twice")
	}
	a.ran = true
	now := time.Now()
	a.started.Store(&now)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	a.scaleMu.Lock()
	a.runCtx, a.runStop = runCtx, stop
	a.instMu.Lock()
	for _, in := range a.instances {
		a.startLocked(in)
	}
	a.instMu.Unlock()
	a.running.Store(true)
	a.scaleMu.Unlock()
	maintDone, diskDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(maintDone); a.maintain(runCtx) }()
	go func() { defer close(diskDone); a.watchDiskSpace(runCtx) }()

	var runErr error
	if a.opts.Drain {
		runErr = a.drain(runCtx)
	} else {
		<-runCtx.Done()
	}
	stop()
	a.scaleMu.Lock() // no Scale starts drivers from now on
	a.running.Store(false)
	a.ended.Store(true)
	a.scaleMu.Unlock()
	// The requests waiting for a source are answered now, not when the
	// steps in flight (up to step_timeout) are done and the app closes.
	a.refuseIngestAll()
	a.runWG.Wait()
	<-maintDone
	<-diskDone
	select {
	case err := <-a.fatal:
		runErr = errors.Join(runErr, err)
	default:
	}
	if p := a.sourceErr.Load(); p != nil && runErr == nil && a.opts.Drain {
		runErr = *p
	}
	return runErr
}

// Close closes every flowlet and the store. Call it after Run returned (or
// instead of Run).
func (a *App) Close() error {
	if a.closed {
		return nil
	}
	a.closed = true
	a.ended.Store(true)
	err := a.closeFlowlets()
	a.closePlugins()
	for _, s := range a.gcStores {
		s.Close()
	}
	return errors.Join(err, a.st.close())
}

// closePlugins kills what is left of the plugins' processes (after the
// instances closed theirs).
func (a *App) closePlugins() {
	for _, p := range a.plugins {
		p.Close()
	}
	a.plugins = nil
}

// startLocked starts the driver of an instance (under instMu, with Run
// running).
func (a *App) startLocked(in *instance) {
	a.unsettled.Add(1)
	// Busy from now, not from when the goroutine runs: the instance
	// publishes (a step) before it looks at paused, and a WaitPaused
	// right after a Scale must not answer parked before that.
	in.activate()
	a.runWG.Add(1)
	go func() {
		defer a.runWG.Done()
		defer close(in.done)
		if err := in.run(a.runCtx); err != nil {
			a.stopOn(err)
		}
	}()
}

// stopOn stops the run, which returns err (the first such error; the
// others are logged where they happen).
func (a *App) stopOn(err error) {
	select {
	case a.fatal <- err:
	default:
	}
	a.runStop()
}

func (a *App) closeFlowlets() error {
	var errs []error
	a.instMu.Lock()
	defer a.instMu.Unlock()
	for _, in := range a.instances {
		if err := in.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// maintain runs state GC and queue maintenance in the background.
func (a *App) maintain(ctx context.Context) {
	gc := time.NewTicker(a.opts.GCInterval)
	defer gc.Stop()
	mt := time.NewTicker(a.opts.MaintainInterval)
	defer mt.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-gc.C:
			a.gcState()
		case <-mt.C:
			if err := a.st.queues.Maintain(); err != nil && ctx.Err() == nil {
				a.log.Warn("queue maintenance", "err", err)
			}
		}
	}
}

// gcState runs one state GC pass over every flowlet.
func (a *App) gcState() {
	bound := a.wm.Advance()
	if hold := a.st.gcHold(); hold != 0 {
		bound = min(bound, hold) // a read past its timeout (holdGC)
	}
	if bound == 0 {
		return
	}
	invalid := a.st.coord.InvalidList()
	for _, s := range a.gcStores {
		if _, err := s.GC(bound, invalid); err != nil {
			a.log.Warn("state gc", "err", err)
		}
	}
}
