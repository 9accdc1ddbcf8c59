package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
	_ "github.com/flowrun/flowrun/runtime/builtin"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command failed (invalid app, run error, ...)
	ExitUsage   = 2 // bad command line
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Main runs the CLI with os.Args and exits.
func Main() {
	os.Exit(Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Run runs the CLI with args and returns the exit code.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	return execute(g.root(), args, stdin, stdout, stderr)
}

// execute runs the command tree root with args and returns the exit code.
func execute(root *cobra.Command, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintf(stderr, "flowrun: %v\n", ee.err)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "flowrun: %v\n", err)
	if isUsage(err) {
		return ExitUsage
	}
	return ExitFailure
}

func isUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "flag needs an argument", "invalid argument",
		"none of the others can be"} { // cobra's MarkFlagsMutuallyExclusive
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

type globals struct {
	stdout, stderr io.Writer
	data           string
	logFormat      string
	logLevel       string
	asJSON         bool
	pluginCache    string
}

func (g *globals) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "flowrun",
		Short:         "flowrun runs stream-processing apps exactly once",
		Long:          "flowrun runs stream-processing apps described in YAML (specs/app-yaml.md) exactly once, on an embedded store.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.data, "data", "", "the app's data directory (default .flowrun/<app>)")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	pf.StringVar(&g.pluginCache, "plugin-cache", os.Getenv("FLOWRUN_PLUGIN_CACHE"), "where plugin package directories are built (default $FLOWRUN_PLUGIN_CACHE, else flowrun/plugins in the user cache directory, else plugins in the data directory)")
	root.AddCommand(g.runCmd(), g.validateCmd(), g.planCmd(), g.stateCmd(), g.queueCmd(), g.dlqCmd(), g.typesCmd(),
		g.statusCmd(), g.topCmd(), g.scaleCmd())
	// Every flag error is a bad command line, whatever pflag calls it
	// ("bad flag syntax: ---" exited 1, as no phrase of isUsage matched).
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{ExitUsage, err} })
	// Every command takes the log flags: a bad value is a bad command
	// line even where nothing logs.
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		_, err := g.logger()
		return err
	}
	for _, c := range root.Commands() {
		if c.HasSubCommands() && !c.Runnable() {
			c.RunE = unknownSubcommand
			// cobra's distance for its own suggestions (it sets it on the
			// root only): 0 would suggest prefixes alone.
			c.SuggestionsMinimumDistance = 2
		}
	}
	return root
}

// unknownSubcommand runs a command group (state, queue, dlq) given no
// known subcommand: cobra printed the group's help and exited 0 for a
// mistyped one ("flowrun queue tial").
func unknownSubcommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return c.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return &exitError{ExitUsage, errors.New(msg)}
}

func (g *globals) addJSON(c *cobra.Command) {
	c.Flags().BoolVar(&g.asJSON, "json", false, "write JSON (specs/cli.md documents the format)")
}

// checkCount rejects a negative count flag (-n): 0 already means "all", and
// a negative one used to read as "all" too (the HTTP API answers 400).
func checkCount(c *cobra.Command, name string, n int) error {
	if n >= 0 {
		return nil
	}
	return &exitError{ExitUsage, fmt.Errorf("%s must be 0 or more, not %d", flagName(c, name), n)}
}

// checkInterval rejects a non-positive refresh interval before anything
// starts (time.NewTicker panics on one).
func checkInterval(c *cobra.Command, name string, d time.Duration) error {
	if d > 0 {
		return nil
	}
	return &exitError{ExitUsage, fmt.Errorf("%s must be positive, not %s", flagName(c, name), d)}
}

// flagName is how the user may have written a flag: -n/--limit.
func flagName(c *cobra.Command, name string) string {
	if f := c.Flags().Lookup(name); f != nil && f.Shorthand != "" {
		return "-" + f.Shorthand + "/--" + name
	}
	return "--" + name
}

func (g *globals) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, &exitError{ExitUsage, fmt.Errorf("--log-level: %v", err)}
	}
	o := &slog.HandlerOptions{Level: lvl}
	switch g.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(g.stderr, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(g.stderr, o)), nil
	}
	return nil, &exitError{ExitUsage, fmt.Errorf("--log-format must be text or json, not %q", g.logFormat)}
}

func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parsePlan plans an app file; planner errors (with file:line:col) exit 1.
func parsePlan(path string) (*planner.Plan, error) {
	p, err := runtime.ParseFile(path)
	if err != nil {
		var el planner.ErrorList
		if errors.As(err, &el) {
			return nil, &exitError{ExitFailure, err}
		}
		return nil, &exitError{ExitFailure, fmt.Errorf("read app: %w", err)}
	}
	return p, nil
}

// appRef is an APP argument: an app file (.yaml/.yml or an existing file) or
// an app name.
type appRef struct {
	name string
	plan *planner.Plan // nil when given by name
}

func resolveApp(arg string) (appRef, error) {
	ext := filepath.Ext(arg)
	fi, err := os.Stat(arg)
	if (err == nil && !fi.IsDir()) || ext == ".yaml" || ext == ".yml" {
		p, err := parsePlan(arg)
		if err != nil {
			return appRef{}, err
		}
		return appRef{name: p.App, plan: p}, nil
	}
	// A name is joined to .flowrun/: "../x" named the directory x (an empty
	// one became a store), a misspelled file a store that does not exist.
	if !appNameRE.MatchString(arg) {
		what := "no such file"
		if err == nil {
			what = "a directory"
		}
		return appRef{}, &exitError{ExitFailure, fmt.Errorf("%q is neither an app file (%s) nor an app name (%s)", arg, what, appNameRule)}
	}
	return appRef{name: arg}, nil
}

// appNameRule is the planner's rule for app names (specs/app-yaml.md, Names).
const appNameRule = "[a-z0-9][a-z0-9_-]{0,62}"

var appNameRE = regexp.MustCompile("^" + appNameRule + "$")

func (g *globals) dataDir(app string) string {
	if g.data != "" {
		return g.data
	}
	return runtime.DefaultDataDir(app)
}

// openStore opens the app's store for a read command.
func (g *globals) openStore(app string) (*runtime.Store, error) {
	s, err := runtime.OpenStore(g.dataDir(app))
	if err != nil {
		return nil, &exitError{ExitFailure, err}
	}
	return s, nil
}
