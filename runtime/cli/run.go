package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

func (g *globals) runCmd() *cobra.Command {
	var drain, noSync, deferCommits bool
	var progress string
	var interval time.Duration
	var cpuprofile string
	var httpAddr, httpToken string
	var withPprof bool
	var maxBacklog int
	var memoryLimit string
	var stepTimeout, pluginStartTimeout string
	var minFreeDisk string
	c := &cobra.Command{
		Use:   "run APP.yaml",
		Short: "run an app in the foreground until SIGINT/SIGTERM (or, with --drain, until its input is exhausted)",
		Long: `Run an app in the foreground. SIGINT or SIGTERM stops it: steps in flight
commit or abort, then flowrun exits 0. A restart resumes exactly where the
last commit left off.

With --drain, flowrun exits 0 once every source reported the end of its
input, every queue is empty and no step is in flight (tickers get one last
tick first); it exits 1 if a source gave up on an error.

On a terminal, a live view of events/s, backlog and dead letters per flowlet
is drawn on stderr (--progress).

An HTTP server (specs/http.md) serves health checks, Prometheus metrics, a
JSON API and a web UI of the flow graph on --http (default 127.0.0.1 on a
free port; "off" disables it). Its URL is logged and written to http.json in
the data directory, where flowrun status, top and scale find it. Any
non-loopback address needs a bearer token (--http-token or
` + httpapi.TokenEnv + `).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if progress != "auto" && progress != "always" && progress != "never" {
				return &exitError{ExitUsage, fmt.Errorf("--progress must be auto, always or never, not %q", progress)}
			}
			if err := checkInterval(cmd, "progress-interval", interval); err != nil {
				return err
			}
			// Before anything slow (opening the store, building plugins): a
			// signal during start-up then stops the run cleanly, exit 0,
			// instead of killing the process with the default handler.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			log, err := g.logger()
			if err != nil {
				return err
			}
			sigs := make(chan os.Signal, 2) // registered now: the first signal too
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			ended := make(chan struct{})
			defer close(ended)
			go exitOnSecondSignal(sigs, ended, log)
			plan, err := parsePlan(args[0])
			if err != nil {
				return err
			}
			if g.asJSON {
				// The status would end up in the middle of the data.
				for _, f := range plan.Flowlets {
					if f.Type == "stdout_sink" {
						return &exitError{ExitUsage, fmt.Errorf("--json writes the final status to stdout, where flowlet %q (stdout_sink) writes its events: drop --json, or use a file_sink", f.Name)}
					}
				}
			}
			if httpToken == "" {
				httpToken = os.Getenv(httpapi.TokenEnv)
			}
			rs := resolveRunSettings(cmd.Flags().Changed, plan.Runtime,
				runSettings{http: httpAddr, memoryLimit: memoryLimit, maxBacklog: maxBacklog, noSync: noSync, deferCommits: deferCommits,
					stepTimeout: stepTimeout, pluginStartTimeout: pluginStartTimeout})
			if len(rs.fromFile) > 0 {
				log.Info("run settings from the app file", "settings", strings.Join(rs.fromFile, ", "))
			}
			httpAddr, memoryLimit, maxBacklog, noSync, deferCommits = rs.http, rs.memoryLimit, rs.maxBacklog, rs.noSync, rs.deferCommits
			stepTO, err := planner.ParseTimeout(rs.stepTimeout)
			if err != nil {
				return rs.settingError("--step-timeout", rs.stepTimeoutPos, "runtime.step_timeout", err)
			}
			startTO, err := planner.ParseTimeout(rs.pluginStartTimeout)
			if err != nil {
				return rs.settingError("--plugin-start-timeout", rs.pluginStartTimeoutPos, "runtime.plugin_start_timeout", err)
			}
			var reserve int64 // auto
			switch minFreeDisk {
			case "auto":
			case "off":
				reserve = -1
			default:
				if reserve, err = planner.ParseSize(minFreeDisk); err != nil {
					return &exitError{ExitUsage, fmt.Errorf("--min-free-disk: %w (or auto, off)", err)}
				}
				if reserve == 0 {
					reserve = -1
				}
			}
			limit, err := runtime.ApplyMemoryLimit(memoryLimit)
			if err != nil {
				return rs.settingError("--memory-limit", rs.memoryLimitPos, "runtime.memory_limit", err)
			}
			if limit == math.MaxInt64 {
				log.Info("memory limit", "limit", "off")
			} else {
				log.Info("memory limit", "limit_mib", limit>>20)
			}
			hcfg := httpapi.Config{Addr: httpAddr, Token: httpToken, Pprof: withPprof, Logger: log}
			if httpAddr != "off" {
				// The flag gets the app file's rule: every interface only
				// when written out (0.0.0.0:8080), never by an empty host.
				if err := planner.CheckListenAddr(httpAddr); err != nil {
					return rs.settingError("--http", rs.httpPos, "runtime.http", err)
				}
				// A bad token is not the address's mistake (nor the app
				// file's, which never holds a token).
				if err := httpapi.CheckToken(httpToken); err != nil {
					from := "--http-token"
					if !cmd.Flags().Changed("http-token") {
						from = "$" + httpapi.TokenEnv
					}
					return &exitError{ExitUsage, fmt.Errorf("%s: %w", from, err)}
				}
				if err := httpapi.CheckConfig(hcfg); err != nil {
					return rs.settingError("--http", rs.httpPos, "runtime.http", err)
				}
			}
			a, err := runtime.OpenContext(ctx, plan, runtime.Options{DataDir: g.dataDir(plan.App), NoSync: noSync, DeferCommits: deferCommits, Logger: log, Drain: drain,
				AppDir: filepath.Dir(args[0]), PluginCacheDir: g.pluginCache, MaxBacklog: maxBacklog,
				StepTimeout: stepTO, PluginStartTimeout: startTO, MinFreeDisk: reserve})
			if err != nil {
				if ctx.Err() != nil { // a signal while plugins were built or started
					log.Info("stopped before the app started", "signal", context.Cause(ctx))
					return nil
				}
				return &exitError{ExitFailure, err}
			}
			if cpuprofile != "" {
				f, err := os.Create(cpuprofile)
				if err != nil {
					return &exitError{ExitFailure, err}
				}
				pprof.StartCPUProfile(f)
				defer pprof.StopCPUProfile()
			}
			stopHTTP := func() {}
			if httpAddr != "off" {
				srv, err := httpapi.New(a, hcfg)
				if err == nil {
					err = srv.Start()
				}
				if err != nil {
					a.Close()
					return &exitError{ExitFailure, err}
				}
				// Stopped before the app closes its store.
				stopHTTP = func() {
					httpapi.RemoveAddrFile(a.DataDir())
					sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					srv.Close(sctx)
				}
				info := httpapi.AddrInfo{URL: srv.URL(), PID: os.Getpid(), App: plan.App, TokenRequired: httpToken != "", Started: time.Now().UTC()}
				if err := httpapi.WriteAddrFile(a.DataDir(), info); err != nil {
					log.Warn("cannot write the HTTP address file", "err", err)
				}
				log.Info("http server listening", "app", plan.App, "url", srv.URL(), "ui", srv.URL()+"/", "metrics", srv.URL()+"/metrics", "pprof", withPprof)
			}
			show := progress == "always" || (progress == "auto" && isTTY(g.stderr))
			done := make(chan struct{})
			viewDone := make(chan struct{})
			go func() {
				defer close(viewDone)
				if show {
					progressView(a, g.stderr, interval, done)
				}
			}()
			data := a.DataDir()
			if abs, err := filepath.Abs(data); err == nil {
				data = abs
			}
			log.Info("running", "app", plan.App, "data", data, "drain", drain)
			runErr := a.Run(ctx)
			stopHTTP()
			close(done)
			<-viewDone
			st := a.Status()
			closeErr := a.Close()
			if g.asJSON {
				g.printJSON(st)
			} else if show || drain {
				printSummary(g.stderr, st, runErr)
			}
			if runErr != nil {
				return &exitError{ExitFailure, runErr}
			}
			if closeErr != nil {
				return &exitError{ExitFailure, closeErr}
			}
			log.Info("stopped", "app", plan.App, "drained", st.Drained)
			return nil
		},
	}
	f := c.Flags()
	f.BoolVar(&drain, "drain", false, "exit once sources are exhausted, every queue is empty and no step is in flight")
	f.BoolVar(&noSync, "no-sync", false, "do not fsync commits (survives kill -9, not power loss); faster")
	f.BoolVar(&deferCommits, "defer-commits", false, "steps commit deferred: visible to the next steps before their fsync, which later steps share; faster, and nothing outside the app hears of a step before it is durable, but a power loss may undo the last steps (see specs/guarantees.md)")
	f.StringVar(&progress, "progress", "auto", "live progress view on stderr: auto (on a terminal), always or never")
	f.DurationVar(&interval, "progress-interval", time.Second, "progress view refresh interval")
	f.StringVar(&cpuprofile, "cpuprofile", "", "write a CPU profile of the run to this file")
	f.MarkHidden("cpuprofile")
	f.StringVar(&httpAddr, "http", httpapi.DefaultAddr, `HTTP server address (API, metrics, web UI); "off" disables it`)
	f.StringVar(&httpToken, "http-token", "", "bearer token required on every HTTP request (default $"+httpapi.TokenEnv+"); needed off loopback")
	f.BoolVar(&withPprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the HTTP server")
	f.IntVar(&maxBacklog, "max-backlog", runtime.DefaultMaxBacklog, "back-pressure: a source waits while an output queue has more unconsumed events than this, unless its config sets "+runtime.MaxBacklogKey+" (negative: no bound)")
	f.StringVar(&memoryLimit, "memory-limit", "auto", `soft memory limit of the process (Go's GOMEMLIMIT): "auto" (the store's memory budget + 64MiB, unless GOMEMLIMIT is set), "off", or a size such as 512MiB or 2GiB`)
	f.StringVar(&stepTimeout, "step-timeout", "1m", "how long one step's transaction may run (up to 1h); a plugin's call is killed after half of it")
	f.StringVar(&pluginStartTimeout, "plugin-start-timeout", "30s", "how long a plugin process may take to start and hand-shake (up to 1h)")
	f.StringVar(&minFreeDisk, "min-free-disk", "auto", "free space kept on the store's file system: the run refuses to start under it, and stops cleanly when it falls under it; auto: 128MiB, or a twentieth of a smaller file system (at least 16MiB); off: no check")
	g.addJSON(c)
	c.Flags().Lookup("json").Usage = "at exit, write the final status as JSON to stdout"
	return c
}

// runSettings are the run command's settings that the app file's runtime
// section may also set.
type runSettings struct {
	http         string
	memoryLimit  string
	maxBacklog   int
	noSync       bool
	deferCommits bool

	stepTimeout, pluginStartTimeout string

	// Where the file set a value taken from it (nil: a flag or a default),
	// and which settings came from the file, for the log.
	httpPos, memoryLimitPos               *planner.Position
	stepTimeoutPos, pluginStartTimeoutPos *planner.Position
	fromFile                              []string
}

// resolveRunSettings applies the precedence of the run settings: a flag
// given on the command line wins, then the app file's runtime section, then
// the flag's default. flags holds the values of the flags (their defaults
// when not given), changed reports whether a flag was given.
func resolveRunSettings(changed func(flag string) bool, file planner.Runtime, flags runSettings) runSettings {
	rs := flags
	use := func(flag, field string) bool {
		if changed(flag) {
			return false
		}
		rs.fromFile = append(rs.fromFile, field)
		return true
	}
	if f := file.HTTP; f != nil && use("http", "http") {
		rs.http, rs.httpPos = f.Value, &f.Pos
	}
	if f := file.MemoryLimit; f != nil && use("memory-limit", "memory_limit") {
		rs.memoryLimit, rs.memoryLimitPos = f.Value, &f.Pos
	}
	if f := file.MaxBacklog; f != nil && use("max-backlog", "max_backlog") {
		rs.maxBacklog = f.Value
	}
	if f := file.NoSync; f != nil && use("no-sync", "no_sync") {
		rs.noSync = f.Value
	}
	if f := file.DeferCommits; f != nil && use("defer-commits", "defer_commits") {
		rs.deferCommits = f.Value
	}
	if f := file.StepTimeout; f != nil && use("step-timeout", "step_timeout") {
		rs.stepTimeout, rs.stepTimeoutPos = f.Value, &f.Pos
	}
	if f := file.PluginStartTimeout; f != nil && use("plugin-start-timeout", "plugin_start_timeout") {
		rs.pluginStartTimeout, rs.pluginStartTimeoutPos = f.Value, &f.Pos
	}
	return rs
}

// settingError reports a bad setting: a flag's is a bad command line (exit
// 2); the app file's is an error at its position in the file (exit 1).
func (rs runSettings) settingError(flag string, pos *planner.Position, field string, err error) error {
	if pos == nil {
		return &exitError{ExitUsage, fmt.Errorf("%s: %w", flag, err)}
	}
	return &exitError{ExitFailure, &planner.Error{File: pos.File, Line: pos.Line, Col: pos.Col, Msg: fmt.Sprintf("%s: %v", field, err)}}
}

func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressView redraws a table of the app's flowlets every interval.
func progressView(a *runtime.App, w io.Writer, interval time.Duration, done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	lines := 0
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		var b strings.Builder
		writeTable(&b, a.Status(), false)
		out := b.String()
		if lines > 0 {
			fmt.Fprintf(w, "\x1b[%dA", lines)
		}
		for _, l := range strings.SplitAfter(out, "\n") {
			if l != "" {
				fmt.Fprint(w, "\x1b[2K"+l)
			}
		}
		lines = strings.Count(out, "\n")
	}
}

// writeTable writes the flowlets' table of the progress view and of the
// summary. With avg (the summary at the end), events/s is each flowlet's average over
// the run: the live rate is of the last second or so, 0 for a run shorter
// than that and near 0 for one that spent it draining.
func writeTable(w io.Writer, st runtime.Status, avg bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	rateHead := "events/s"
	if avg {
		rateHead = "avg events/s"
	}
	fmt.Fprintf(tw, "flowlet\tinst\t%s\tprocessed\tbacklog\tfailed\tdlq\t\n", rateHead)
	for _, f := range st.Flowlets {
		rate := f.Rate
		if avg && st.Uptime > 0 {
			rate = float64(f.Processed) / st.Uptime
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%d\t%d\t%d\t\n", f.Name, f.Instances, rate, f.Processed, f.Backlog, f.Failed, f.DLQ)
	}
	tw.Flush()
	fmt.Fprintf(w, "tx: %d committed, %d aborted, %d conflicts, %d empty steps, commit p99 %.1fms   uptime %.0fs\n",
		st.Tx.Committed, st.Tx.Aborted, st.Tx.Conflicts, st.Tx.EmptySteps, st.Tx.CommitP99, st.Uptime)
}

// printSummary writes the run's last status; runErr is what Run returned
// (a source that gave up leaves the app drained, yet the run failed).
func printSummary(w io.Writer, st runtime.Status, runErr error) {
	state := "stopped"
	switch {
	case runErr != nil:
		state = "stopped on an error"
	case st.Drained:
		state = "drained"
	}
	fmt.Fprintf(w, "app %s %s after %.1fs\n", st.App, state, st.Uptime)
	writeTable(w, st, true)
	for _, f := range st.Flowlets {
		if f.LastError != "" {
			fmt.Fprintf(w, "%s: last error: %s\n", f.Name, printable([]byte(f.LastError)))
		}
	}
}

// exitOnSecondSignal exits the process at once on the second SIGINT or
// SIGTERM it receives on sigs: the first asked for a clean stop, which waits
// for the steps in flight, up to --step-timeout, and a step stuck in user
// code or a hung plugin can hold it that long; an operator who presses
// Ctrl-C again wants out now. Exiting mid-step loses nothing: a step commits
// or aborts whole, and the store recovers at the next start as after kill -9.
// The exit status is 128 + the signal's number, as a shell reports a kill.
func exitOnSecondSignal(sigs <-chan os.Signal, ended <-chan struct{}, log *slog.Logger) {
	for first := true; ; first = false {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-ended:
			return
		}
		if first {
			log.Info("stopping: waiting for the steps in flight; a second signal exits at once", "signal", sig)
			continue
		}
		log.Warn("second signal: exiting without waiting for the steps in flight (they abort and run again from their inputs; a stdin_source's lines read and not yet committed are lost)", "signal", sig)
		code := 128 + int(syscall.SIGTERM)
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	}
}
