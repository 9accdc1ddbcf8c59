package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// remote is how status, top and scale reach a running app.
type remote struct {
	addr, token string
}

func (g *globals) remoteFlags(c *cobra.Command, r *remote) {
	c.Flags().StringVar(&r.addr, "addr", "", "the running app's HTTP address (default: read from http.json in its data directory)")
	c.Flags().StringVar(&r.token, "token", "", "bearer token (default $"+httpapi.TokenEnv+")")
}

// client finds the running app of appArg (an app file or name).
func (g *globals) client(appArg string, r *remote) (*httpapi.Client, error) {
	token := r.token
	if token == "" {
		token = os.Getenv(httpapi.TokenEnv)
	}
	ref, err := resolveApp(appArg)
	if err != nil {
		return nil, err
	}
	if r.addr != "" {
		// Checked as the address file's is (below): a wrong --addr sent a
		// scale to the flowlet of that name in whatever app served it.
		cl := &httpapi.Client{URL: r.addr, Token: token}
		if app, ok := servedApp(cl); ok && app != ref.name {
			return nil, &exitError{ExitFailure, fmt.Errorf("%s serves app %q, not %q", r.addr, app, ref.name)}
		}
		return cl, nil
	}
	dir := g.dataDir(ref.name)
	info, err := httpapi.ReadAddrFile(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, &exitError{ExitFailure, fmt.Errorf("app %q is not running with its HTTP server (no %s); start it with flowrun run, or pass --addr",
				ref.name, filepath.Join(dir, httpapi.AddrFile))}
		}
		return nil, &exitError{ExitFailure, err}
	}
	// http.json outlives a run killed with -9, and its address may serve
	// another app since: check that the run is alive and is this app
	// (before asking for a token a dead run no longer needs).
	notRunning := func(why string) error {
		return &exitError{ExitFailure, fmt.Errorf("app %q is not running: %s (%s is left from a run that ended)", ref.name, why, filepath.Join(dir, httpapi.AddrFile))}
	}
	if info.PID > 0 && !processAlive(info.PID) {
		return nil, notRunning(fmt.Sprintf("process %d is gone", info.PID))
	}
	if info.TokenRequired && token == "" {
		return nil, &exitError{ExitFailure, fmt.Errorf("app %q requires a bearer token: pass --token or set %s", ref.name, httpapi.TokenEnv)}
	}
	cl := &httpapi.Client{URL: info.URL, Token: token}
	if app, ok := servedApp(cl); ok && app != ref.name {
		return nil, notRunning(fmt.Sprintf("%s serves app %q now", info.URL, app))
	}
	return cl, nil
}

// servedApp is the name of the app cl reaches, if it answers its status
// (if not, the command's own request says why).
func servedApp(cl *httpapi.Client) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	return st.App, err == nil
}

// processAlive reports whether a process with this id exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func remoteErr(c *httpapi.Client, err error) error {
	if httpapi.IsUnauthorized(err) {
		return &exitError{ExitFailure, fmt.Errorf("%s: %w (pass --token or set %s)", c.URL, err, httpapi.TokenEnv)}
	}
	var ae *httpapi.APIError
	if errors.As(err, &ae) {
		return &exitError{ExitFailure, err}
	}
	return &exitError{ExitFailure, fmt.Errorf("cannot reach the app at %s (is it running?): %w", c.URL, err)}
}

func (g *globals) statusCmd() *cobra.Command {
	var r remote
	c := &cobra.Command{
		Use:   "status APP",
		Short: "show a running app: its flow graph with rates, backlog, dead letters and instances (through its HTTP API)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := g.client(args[0], &r)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			st, err := cl.Status(ctx)
			if err != nil {
				return remoteErr(cl, err)
			}
			if g.asJSON {
				return g.printJSON(st)
			}
			writeStatus(g.stdout, st, cl.URL)
			return nil
		},
	}
	g.remoteFlags(c, &r)
	g.addJSON(c)
	c.Flags().Lookup("json").Usage = "write the status as JSON (runtime.Status, specs/cli.md)"
	return c
}

func (g *globals) topCmd() *cobra.Command {
	var r remote
	var interval time.Duration
	var iterations int
	c := &cobra.Command{
		Use:   "top APP",
		Short: "watch a running app: the status view, refreshed in the terminal until Ctrl-C",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkInterval(cmd, "interval", interval); err != nil {
				return err
			}
			if err := checkCount(cmd, "iterations", iterations); err != nil {
				return err
			}
			cl, err := g.client(args[0], &r)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			tty := isTTY(g.stdout)
			if tty {
				fmt.Fprint(g.stdout, "\x1b[?25l") // hide the cursor
				defer fmt.Fprint(g.stdout, "\x1b[?25h")
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			failures := 0
			app := "" // set once the app answered
			for i := 0; iterations == 0 || i < iterations; i++ {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				st, err := cl.Status(rctx)
				cancel()
				var b strings.Builder
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					// The app that answered before stopped: the end of
					// watching it, not a failure.
					if app != "" && errors.Is(err, syscall.ECONNREFUSED) {
						fmt.Fprintf(g.stdout, "\napp %s stopped (%s no longer answers)\n", app, cl.URL)
						return nil
					}
					failures++
					if failures >= 5 || httpapi.IsUnauthorized(err) {
						return remoteErr(cl, err)
					}
					fmt.Fprintf(&b, "flowrun top: %v (retrying)\n", err)
				} else {
					failures, app = 0, st.App
					writeStatus(&b, st, cl.URL)
					fmt.Fprintf(&b, "\nrefreshing every %s; Ctrl-C to quit\n", interval)
				}
				if tty {
					fmt.Fprint(g.stdout, "\x1b[H\x1b[2J"+b.String())
				} else {
					fmt.Fprint(g.stdout, b.String()+"\n")
				}
				if iterations > 0 && i == iterations-1 {
					break
				}
				select {
				case <-ctx.Done():
					return nil
				case <-t.C:
				}
			}
			return nil
		},
	}
	g.remoteFlags(c, &r)
	c.Flags().DurationVar(&interval, "interval", time.Second, "refresh interval")
	c.Flags().IntVarP(&iterations, "iterations", "n", 0, "stop after this many refreshes (0 = until Ctrl-C)")
	return c
}

func (g *globals) scaleCmd() *cobra.Command {
	var r remote
	c := &cobra.Command{
		Use:   "scale APP FLOWLET N",
		Short: "change a running flowlet's instance count while events flow (through the app's HTTP API)",
		Long: `Change the instance count of a flowlet of a running app. Instances being
removed finish their step in flight; the consumer groups of the flowlet's
inputs are rescaled; new instances start. Nothing is lost or processed twice,
and hash groups keep each key's order. Sources cannot be scaled. The count
lasts until the app stops: the next run uses the app file's.`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[2])
			if err != nil || n < 1 {
				return &exitError{ExitUsage, fmt.Errorf("N must be a number >= 1, not %q", args[2])}
			}
			cl, err := g.client(args[0], &r)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			res, err := cl.Scale(ctx, args[1], n)
			if err != nil {
				return remoteErr(cl, err)
			}
			if g.asJSON {
				return g.printJSON(res)
			}
			unit := "instances"
			if res.Instances == 1 {
				unit = "instance"
			}
			if res.Pending != "" {
				fmt.Fprintf(g.stdout, "%s: %d → %d %s, pending: %s\n", res.Flowlet, res.Previous, res.Instances, unit, res.Pending)
				return nil
			}
			fmt.Fprintf(g.stdout, "%s: %d → %d %s\n", res.Flowlet, res.Previous, res.Instances, unit)
			return nil
		},
	}
	g.remoteFlags(c, &r)
	g.addJSON(c)
	// A negative N looks like a flag to pflag: "unknown shorthand flag:
	// '1' in -1" named no N.
	c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		if _, tok, ok := strings.Cut(err.Error(), "unknown shorthand flag: "); ok {
			if _, v, ok := strings.Cut(tok, " in "); ok {
				if _, nerr := strconv.Atoi(v); nerr == nil {
					err = fmt.Errorf("N must be a number >= 1, not %q", v)
				}
			}
		}
		return &exitError{ExitUsage, err}
	})
	return c
}

// writeStatus draws the status: flowlets in topological order, then the
// queues between them (the graph's edges), then transactions.
func writeStatus(w io.Writer, st runtime.Status, url string) {
	state := "starting"
	switch {
	case st.Drained:
		state = "drained"
	case st.Ready:
		state = "running"
	}
	fmt.Fprintf(w, "app %s  %s  up %s  %s\n\n", st.App, state, (time.Duration(st.Uptime) * time.Second).String(), url)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "FLOWLET\tTYPE\tINST\tEVENTS/S\tPROCESSED\tBACKLOG\tFAILED\tDLQ\tSTATE\n")
	for _, f := range st.Flowlets {
		backlog := strconv.FormatInt(f.Backlog, 10)
		if f.Source {
			backlog = "-"
		}
		fs := ""
		switch {
		case f.Paused && (f.Parked || f.Busy == 0): // (an older server sends no parked)
			fs = "paused"
		case f.Paused: // steps in flight finish first
			fs = fmt.Sprintf("pausing (%d busy)", f.Busy)
		case f.Source && f.Done >= f.Instances:
			fs = "ended"
		}
		if f.LastError != "" && (f.Failed > 0 || f.DLQ > 0) {
			if fs != "" {
				fs += "; "
			}
			fs += "last error: " + truncate(f.LastError, 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%d\t%s\t%d\t%d\t%s\n", f.Name, f.Type, f.Instances, f.Rate, f.Processed, backlog, f.Failed, f.DLQ, fs)
	}
	tw.Flush()
	byName := map[string]runtime.QueueStatus{}
	for _, q := range st.Queues {
		byName[q.Name] = q
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "QUEUE\tEDGE\tSTRATEGY\tWAITING\tSTORED\n")
	for _, f := range st.Flowlets {
		for _, o := range f.Outputs {
			q := byName[o]
			var consumers []string
			for g := range q.Lag {
				consumers = append(consumers, g)
			}
			sort.Strings(consumers)
			if len(consumers) == 0 {
				fmt.Fprintf(tw, "%s\t%s → (none)\t\t\t%d\n", o, f.Name, q.Events)
			}
			for _, c := range consumers {
				fmt.Fprintf(tw, "%s\t%s → %s\t%s\t%d\t%d\n", o, f.Name, c, q.Strategy[c], q.Lag[c], q.Events)
			}
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\ntx: %d committed, %d aborted, %d conflicts, %d empty steps, %d in progress, commit p50 %.2fms p99 %.2fms\n",
		st.Tx.Committed, st.Tx.Aborted, st.Tx.Conflicts, st.Tx.EmptySteps, st.Tx.InProgress, st.Tx.CommitP50, st.Tx.CommitP99)
}

// truncate shortens an error for one line of a table: printable (an error
// may carry a payload's escape sequences to the terminal), cut at a
// character's start.
func truncate(s string, n int) string {
	s = printable([]byte(strings.ReplaceAll(s, "\n", " ")))
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
