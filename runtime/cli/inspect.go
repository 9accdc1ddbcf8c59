package cli

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/runtime"
)

func (g *globals) validateCmd() *cobra.Command {
	var againstStore bool
	c := &cobra.Command{
		Use:     "validate APP.yaml",
		Aliases: []string{"lint"},
		Short:   "check an app file; print every problem as file:line:col: message",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			plan, err := runtime.ParseFile(args[0])
			if err == nil && runtime.HasPlugins(plan) {
				// Build, start and describe every plugin: build failures
				// and handshake errors are the app's errors too. A signal
				// stops the build (it runs in a process group of its own,
				// which the terminal's Ctrl-C does not reach).
				ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
				defer stop()
				log, lerr := g.logger()
				if lerr != nil {
					return lerr
				}
				err = runtime.CheckPlugins(ctx, plan, runtime.Options{DataDir: g.dataDir(plan.App),
					AppDir: filepath.Dir(args[0]), PluginCacheDir: g.pluginCache, Logger: log})
			}
			// With --store: what a run would change in the app's store, or
			// why it would refuse to run on it; nothing is changed.
			var store *storeCheck
			fileOK := err == nil
			if err == nil && againstStore {
				store = &storeCheck{Dir: g.dataDir(plan.App), Changes: []string{}}
				exists, serr := runtime.StoreExists(store.Dir)
				switch {
				case serr != nil:
				case !exists:
					store.None = true
				default:
					store.Changes, serr = runtime.CheckStore(plan, store.Dir)
				}
				if serr != nil {
					store.Error, err = serr.Error(), fmt.Errorf("store %s: %w", store.Dir, serr)
				}
			}
			var el planner.ErrorList
			if g.asJSON {
				type ej struct {
					File    string `json:"file"`
					Line    int    `json:"line"`
					Col     int    `json:"col"`
					Message string `json:"message"`
				}
				out := struct {
					Valid  bool        `json:"valid"`
					Errors []ej        `json:"errors"`
					Store  *storeCheck `json:"store,omitempty"`
				}{Valid: fileOK, Errors: []ej{}, Store: store}
				isList := err != nil && errorsAs(err, &el)
				for _, e := range el {
					out.Errors = append(out.Errors, ej{e.File, e.Line, e.Col, e.Msg})
				}
				if err != nil && !isList && (store == nil || store.Error == "") {
					// Not a problem in the file (it cannot be read, a
					// plugin does not build): still an answer on stdout.
					out.Errors = append(out.Errors, ej{File: args[0], Message: err.Error()})
				}
				g.printJSON(out)
				if err != nil {
					return &exitError{ExitFailure, nil}
				}
				return nil
			}
			if err != nil {
				if errorsAs(err, &el) {
					for _, e := range el {
						fmt.Fprintln(g.stdout, e.Error())
					}
					return &exitError{ExitFailure, fmt.Errorf("%s: %d problem(s)", args[0], len(el))}
				}
				return &exitError{ExitFailure, err}
			}
			fmt.Fprintf(g.stdout, "%s: ok\n", args[0])
			switch {
			case store == nil:
			case store.None:
				fmt.Fprintf(g.stdout, "store %s: none yet (a run creates it)\n", store.Dir)
			case len(store.Changes) == 0:
				fmt.Fprintf(g.stdout, "store %s: a run changes nothing in it\n", store.Dir)
			default:
				fmt.Fprintf(g.stdout, "store %s: a run would\n", store.Dir)
				for _, ch := range store.Changes {
					fmt.Fprintf(g.stdout, "  %s\n", ch)
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&againstStore, "store", false, "also check the app against its store (--data): what a run would change in it, or why it would refuse to run; nothing is changed")
	g.addJSON(c)
	return c
}

// storeCheck is validate --store's answer.
type storeCheck struct {
	Dir     string   `json:"dir"`
	None    bool     `json:"none,omitempty"` // no store yet
	Changes []string `json:"changes"`
	Error   string   `json:"error,omitempty"`
}

func (g *globals) planCmd() *cobra.Command {
	var dot bool
	c := &cobra.Command{
		Use:   "plan APP.yaml",
		Short: "show what an app runs: flowlets, queues and consumer groups (text, --dot or --json)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parsePlan(args[0])
			if err != nil {
				return err
			}
			switch {
			case g.asJSON:
				return g.printJSON(p)
			case dot:
				fmt.Fprint(g.stdout, p.DOT())
			default:
				fmt.Fprint(g.stdout, p.Text())
			}
			return nil
		},
	}
	c.Flags().BoolVar(&dot, "dot", false, "write a Graphviz digraph")
	g.addJSON(c)
	c.MarkFlagsMutuallyExclusive("dot", "json")
	return c
}

func (g *globals) typesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "types",
		Short: "list the flowlet types this binary has",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ts := flowlet.Types()
			if g.asJSON {
				type tj struct {
					Name    string   `json:"name"`
					Source  bool     `json:"source"`
					Sink    bool     `json:"sink"`
					Outputs []string `json:"outputs"`
					Doc     string   `json:"doc"`
				}
				out := []tj{}
				for _, t := range ts {
					out = append(out, tj{t.Name, t.Info.Source, t.Info.Sink, append([]string{}, t.Info.Outputs...), t.Info.Doc})
				}
				return g.printJSON(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			for _, t := range ts {
				kind := "flowlet"
				if t.Info.Source {
					kind = "source"
				} else if t.Info.Sink {
					kind = "sink"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, kind, t.Info.Doc)
			}
			return tw.Flush()
		},
	}
	g.addJSON(c)
	return c
}

// printable quotes b for text output when it is not plain printable UTF-8.
func printable(b []byte) string {
	if utf8.Valid(b) {
		ok := true
		for _, r := range string(b) {
			if !unicode.IsPrint(r) { // C0 and C1 controls, DEL, format characters
				ok = false
				break
			}
		}
		if ok {
			return string(b)
		}
	}
	return strconv.Quote(string(b))
}

func (g *globals) stateCmd() *cobra.Command {
	c := &cobra.Command{Use: "state", Short: "read a flowlet's state (the app must not be running)"}
	var counters bool
	var prefix, prefixB64, start, startB64 string
	var limit int
	get := &cobra.Command{
		Use:   "get APP FLOWLET [TABLE] [KEY]",
		Short: "without TABLE: list the flowlet's tables; with TABLE and KEY: one value or count",
		Args:  cobra.RangeArgs(2, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 3 {
				return g.stateScan(args[0], args[1], args[2], counters, "", nil, limit)
			}
			return g.stateGet(args, counters)
		},
	}
	scan := &cobra.Command{
		Use:   "scan APP FLOWLET [TABLE]",
		Short: "list the keys and values of a table (every table without TABLE)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkCount(cmd, "limit", limit); err != nil {
				return err
			}
			from, err := keyFlag("start", start, startB64)
			if err != nil {
				return err
			}
			pre, err := keyFlag("prefix", prefix, prefixB64)
			if err != nil {
				return err
			}
			table := ""
			if len(args) == 3 {
				table = args[2]
			}
			return g.stateScan(args[0], args[1], table, counters, string(pre), from, limit)
		},
	}
	for _, sc := range []*cobra.Command{get, scan} {
		sc.Flags().BoolVar(&counters, "counters", false, "TABLE is a counter table (default: guessed from the stored data)")
		g.addJSON(sc)
	}
	scan.Flags().StringVar(&prefix, "prefix", "", "only keys with this prefix")
	scan.Flags().StringVar(&prefixB64, "prefix-base64", "", "--prefix given in base64 (one that does not print)")
	scan.Flags().StringVar(&start, "start", "", "only keys from this one on (where a truncated scan stopped)")
	scan.Flags().StringVar(&startB64, "start-base64", "", "--start of a key given in base64 (one that does not print)")
	scan.Flags().IntVarP(&limit, "limit", "n", 0, "at most this many keys per table (0 = all)")
	c.AddCommand(get, scan)
	return c
}

// openApp resolves an APP argument and opens its store for a read command.
func (g *globals) openApp(appArg string) (appRef, *runtime.Store, error) {
	ref, err := resolveApp(appArg)
	if err != nil {
		return ref, nil, err
	}
	s, err := g.openStore(ref.name)
	if err != nil {
		return ref, s, err
	}
	if err := s.CheckApp(ref.name); err != nil {
		// --data naming another app's store: its reads would answer for
		// that app under this one's name.
		s.Close()
		return ref, nil, &exitError{ExitFailure, err}
	}
	return ref, s, nil
}

// checkFlowlet rejects a flowlet the app does not have (a typo used to read
// as a flowlet without state): the plan's flowlets when APP is a file, else
// those with a dead-letter queue in the store (every flowlet that ran has
// one); a flowlet with stored state is always known.
func checkFlowlet(ref appRef, s *runtime.Store, fl string) error {
	var known []string
	where := "flowlets"
	if ref.plan != nil {
		for _, f := range ref.plan.Flowlets {
			known = append(known, f.Name)
		}
	} else {
		var err error
		if known, err = s.DLQFlowlets(); err != nil {
			return &exitError{ExitFailure, err}
		}
		where = "flowlets in its store"
	}
	if slices.Contains(known, fl) {
		return nil
	}
	if ts, err := s.Tables(ref.name, fl); err != nil || len(ts) > 0 {
		return err
	}
	list := "none"
	if len(known) > 0 {
		sort.Strings(known)
		list = strings.Join(known, ", ")
	}
	return &exitError{ExitFailure, fmt.Errorf("app %q has no flowlet %q (%s: %s)", ref.name, fl, where, list)}
}

// kindOf is the kind of a table as its stored data says; --counters picks
// the counters of a name that holds both, and fails on a name that holds
// only key-value data (it used to read every key there as a count of 0).
func (g *globals) kindOf(s *runtime.Store, app, fl, table string, counters bool) (string, error) {
	ts, err := s.Tables(app, fl)
	if err != nil {
		return "", err
	}
	kind := ""
	for _, t := range ts {
		if t.Name == table && (kind == "" || t.Kind == "table" && !counters || t.Kind == "counters" && counters) {
			kind = t.Kind
		}
	}
	if kind == "" {
		return "", &exitError{ExitFailure, fmt.Errorf("flowlet %q has no table %q with data (see: flowrun state get %s %s)", fl, table, app, fl)}
	}
	if counters && kind != "counters" {
		return "", &exitError{ExitFailure, fmt.Errorf("table %q of flowlet %q holds key-value data, not counters (drop --counters)", table, fl)}
	}
	return kind, nil
}

// counterExists reports whether a counter has committed increments: Get
// reads 0 for a key never added to, and a missing key exits 1.
func counterExists(r runtime.StateReader, table string, key []byte) (bool, error) {
	it := r.Counters(table).Scan(flowlet.ScanOptions{Start: key, End: append(slices.Clip(key), 0), Limit: 1})
	defer it.Close()
	found := it.Next()
	return found, it.Err()
}

func (g *globals) stateGet(args []string, counters bool) error {
	ref, s, err := g.openApp(args[0])
	if err != nil {
		return err
	}
	defer s.Close()
	fl := args[1]
	if err := checkFlowlet(ref, s, fl); err != nil {
		return err
	}
	if len(args) == 2 {
		ts, err := s.Tables(ref.name, fl)
		if err != nil {
			return err
		}
		if g.asJSON {
			if ts == nil {
				ts = []runtime.TableInfo{}
			}
			return g.printJSON(ts)
		}
		if len(ts) == 0 {
			fmt.Fprintf(g.stderr, "flowlet %q of app %q has no state\n", fl, ref.name)
		}
		for _, t := range ts {
			fmt.Fprintf(g.stdout, "%s\t%s\n", t.Name, t.Kind)
		}
		return nil
	}
	table, key := args[2], args[3]
	kind, err := g.kindOf(s, ref.name, fl, table, counters)
	if err != nil {
		return err
	}
	var out runtime.StateEntry
	found := true
	err = s.View(ref.name, fl, func(r runtime.StateReader) error {
		var err error
		if kind == "counters" {
			if found, err = counterExists(r, table, []byte(key)); !found || err != nil {
				out.Key = runtime.NewBytes([]byte(key))
				return err
			}
		}
		out, found, err = runtime.GetStateEntry(r, runtime.TableInfo{Name: table, Kind: kind}, []byte(key))
		return err
	})
	if err != nil {
		return &exitError{ExitFailure, err}
	}
	if !found {
		if g.asJSON {
			g.printJSON(out)
		}
		if kind == "counters" {
			return &exitError{ExitFailure, fmt.Errorf("counter table %q of flowlet %q has no key %q (nothing was ever added to it)", table, fl, key)}
		}
		return &exitError{ExitFailure, fmt.Errorf("table %q of flowlet %q has no key %q", table, fl, key)}
	}
	if g.asJSON {
		return g.printJSON(out)
	}
	if out.Count != nil {
		fmt.Fprintln(g.stdout, *out.Count)
	} else {
		fmt.Fprintln(g.stdout, printable(out.Value.Raw()))
	}
	return nil
}

// keyFlag is a key given as --NAME or, one that does not print, as
// --NAME-base64 (nil: neither).
func keyFlag(name, text, b64 string) ([]byte, error) {
	switch {
	case text != "" && b64 != "":
		return nil, &exitError{ExitUsage, fmt.Errorf("give --%s or --%s-base64, not both", name, name)}
	case b64 != "":
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, &exitError{ExitUsage, fmt.Errorf("--%s-base64: %v", name, err)}
		}
		return b, nil
	case text != "":
		return []byte(text), nil
	}
	return nil, nil
}

// resumeFlag is the flag that makes a state scan go on at key: --start
// for a key of letters, digits and -_.,:/=+@% (a shell passes it as
// written), else --start-base64: a key that would print quoted (its
// escapes are not its bytes), that no argument can hold (a NUL), or that a
// shell would split, expand or run (a b, x*, a;b, $x).
func resumeFlag(key []byte) string {
	plain := utf8.Valid(key) && len(key) > 0
	for _, r := range string(key) {
		plain = plain && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_.,:/=+@%", r))
	}
	if plain {
		return "--start " + string(key)
	}
	return "--start-base64 " + base64.StdEncoding.EncodeToString(key)
}

func (g *globals) stateScan(appArg, fl, table string, counters bool, prefix string, start []byte, limit int) error {
	ref, s, err := g.openApp(appArg)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := checkFlowlet(ref, s, fl); err != nil {
		return err
	}
	var tables []runtime.TableInfo
	if table == "" {
		if tables, err = s.Tables(ref.name, fl); err != nil {
			return err
		}
	} else {
		kind, err := g.kindOf(s, ref.name, fl, table, counters)
		if err != nil {
			return err
		}
		tables = []runtime.TableInfo{{Name: table, Kind: kind}}
	}
	out := []runtime.StateTable{}
	err = s.View(ref.name, fl, func(r runtime.StateReader) error {
		for _, t := range tables {
			opts := flowlet.ScanOptions{Prefix: []byte(prefix), Start: start, Limit: limit}
			// Each table as the HTTP API's state scan: the CLI builds it in
			// its own memory.
			tj, err := runtime.ScanStateTableBounded(r, t, opts, runtime.MaxListBytes)
			if err != nil {
				return err
			}
			if tj.Truncated {
				fmt.Fprintf(g.stderr, "table %s: listing truncated at %d MiB: %d keys; the rest begins at key %s: scan table %s again with %s\n",
					t.Name, runtime.MaxListBytes>>20, len(tj.Entries), printable(tj.Next.Raw()), t.Name, resumeFlag(tj.Next.Raw()))
			}
			out = append(out, tj)
		}
		return nil
	})
	if err != nil {
		return &exitError{ExitFailure, err}
	}
	if g.asJSON {
		return g.printJSON(out)
	}
	for _, t := range out {
		if len(tables) > 1 {
			fmt.Fprintf(g.stdout, "# %s (%s)\n", t.Name, t.Kind)
		}
		for _, e := range t.Entries {
			k := printable(e.Key.Raw())
			if e.Count != nil {
				fmt.Fprintf(g.stdout, "%s\t%d\n", k, *e.Count)
			} else {
				fmt.Fprintf(g.stdout, "%s\t%s\n", k, printable(e.Value.Raw()))
			}
		}
	}
	return nil
}

func (g *globals) queueCmd() *cobra.Command {
	c := &cobra.Command{Use: "queue", Short: "inspect an app's queues (the app must not be running)"}
	ls := &cobra.Command{
		Use:   "ls APP",
		Short: "list queues with depth and per-group lag",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, s, err := g.openApp(args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			out, err := s.QueueList()
			if err != nil {
				return &exitError{ExitFailure, err}
			}
			if g.asJSON {
				return g.printJSON(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "QUEUE\tEVENTS\tBYTES\tGROUPS (lag)\n")
			for _, q := range out {
				gs := ""
				for i, gr := range q.Groups {
					if i > 0 {
						gs += ", "
					}
					gs += fmt.Sprintf("%s %s×%d (%d)", gr.Name, gr.Strategy, gr.Instances, gr.Lag)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", q.Name, q.Events, q.Bytes, gs)
			}
			return tw.Flush()
		},
	}
	var n int
	var parts []int
	var from, to, since, until string
	tail := &cobra.Command{
		Use:   "tail APP QUEUE",
		Short: "show stored entries of a queue (committed, not yet evicted), optionally of some partitions, an id range or a time range",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkCount(cmd, "lines", n); err != nil {
				return err
			}
			sel := runtime.QueueSelect{Partitions: parts}
			var err error
			if sel.From, err = entryPointer("from", from, runtime.ParsePointer); err != nil {
				return err
			}
			if sel.To, err = entryPointer("to", to, runtime.ParseUpperPointer); err != nil {
				return err
			}
			now := time.Now()
			if sel.Since, err = instant("since", since, now); err != nil {
				return err
			}
			if sel.Until, err = instant("until", until, now); err != nil {
				return err
			}
			ref, s, err := g.openApp(args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			key := ""
			if ref.plan != nil {
				if q := ref.plan.Queue(args[1]); q != nil {
					key = q.Key
				}
			}
			if n > math.MaxInt/2 {
				// Past any queue's count: every entry, as 0 (above it,
				// TailBounded's 2n wraps negative: a panic).
				n = 0
			}
			es, truncated, err := s.TailBounded(args[1], key, n, 0, runtime.MaxListBytes, sel)
			if err != nil {
				return tailErr(s, ref.name, args[1], parts, err)
			}
			if truncated {
				fmt.Fprintf(g.stderr, "listing truncated at %d MiB: the newest %d entries that fit; select fewer with -n, --partition, --from/--to or --since/--until\n", runtime.MaxListBytes>>20, len(es))
			}
			if g.asJSON {
				return g.printJSON(es)
			}
			for _, e := range es {
				ks := ""
				for _, kv := range e.Keys {
					ks += " " + printable([]byte(kv.Name)) + "=" + printable([]byte(kv.Value))
				}
				fmt.Fprintf(g.stdout, "%s%s\t%s\n", e.ID, ks, printable(e.Payload.Raw()))
			}
			return nil
		},
	}
	tail.Flags().IntVarP(&n, "lines", "n", 10, "show the last n entries (0 = all)")
	tail.Flags().IntSliceVar(&parts, "partition", nil, "only these partitions (repeat or comma-separate)")
	tail.Flags().StringVar(&from, "from", "", "only entries at or after this id (an id as printed, or its write pointer)")
	tail.Flags().StringVar(&to, "to", "", "only entries at or before this id (an id as printed, or its write pointer)")
	tail.Flags().StringVar(&since, "since", "", "only entries enqueued at or after this time (RFC 3339, or a duration ago such as 10m)")
	tail.Flags().StringVar(&until, "until", "", "only entries enqueued at or before this time (RFC 3339, or a duration ago)")
	g.addJSON(ls)
	g.addJSON(tail)
	c.AddCommand(ls, tail)
	return c
}

func (g *globals) dlqCmd() *cobra.Command {
	c := &cobra.Command{Use: "dlq", Short: "inspect and replay dead-letter queues (the app must not be running)"}
	var n int
	ls := &cobra.Command{
		Use:   "ls APP [FLOWLET]",
		Short: "list dead letters (of every flowlet without FLOWLET)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkCount(cmd, "limit", n); err != nil {
				return err
			}
			ref, s, err := g.openApp(args[0])
			if err != nil {
				return err
			}
			defer s.Close()
			var fls []string
			if len(args) == 2 {
				if err := checkFlowlet(ref, s, args[1]); err != nil {
					return err
				}
				fls = []string{args[1]}
			} else if fls, err = s.DLQFlowlets(); err != nil {
				return err
			}
			out, truncated, err := s.DeadLetterListBounded(fls, n, runtime.MaxListBytes)
			if err != nil {
				return &exitError{ExitFailure, err}
			}
			if truncated {
				fmt.Fprintf(g.stderr, "listing truncated at %d MiB: the first %d dead letters that fit; list one FLOWLET or fewer with -n\n", runtime.MaxListBytes>>20, len(out))
			}
			if g.asJSON {
				return g.printJSON(out)
			}
			for _, d := range out {
				trunc := ""
				if d.Truncated {
					trunc = fmt.Sprintf("\ttruncated=%d/%d", len(d.Payload.Raw()), d.PayloadBytes)
				}
				fmt.Fprintf(g.stdout, "%s\t%s\t%s\tattempts=%d\terror=%s%s\tpayload=%s\n", d.Flowlet, d.Input, d.EventID, d.Attempts,
					printable([]byte(d.Error)), trunc, printable(d.Payload.Raw()))
			}
			if len(out) == 0 {
				fmt.Fprintln(g.stderr, "no dead letters")
			}
			return nil
		},
	}
	ls.Flags().IntVarP(&n, "limit", "n", 0, "at most this many per flowlet (0 = all)")
	replay := &cobra.Command{
		Use:   "replay APP.yaml FLOWLET",
		Short: "move a flowlet's dead letters back to its input; they are processed when the app runs next",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := resolveApp(args[0])
			if err != nil {
				return err
			}
			if ref.plan == nil {
				return &exitError{ExitUsage, fmt.Errorf("dlq replay needs the app file (APP.yaml), to know the flowlet's inputs and their partition keys")}
			}
			f := ref.plan.Flowlet(args[1])
			if f == nil {
				return &exitError{ExitFailure, fmt.Errorf("app %q has no flowlet %q", ref.name, args[1])}
			}
			inputs := map[string]string{}
			for _, q := range f.Inputs {
				inputs[q] = ref.plan.Queue(q).Key
			}
			// The replay writes to the store through the file's inputs: not
			// to a store the app would refuse to run on (another app's,
			// a wrong --data, or one its queues no longer fit).
			// (A missing directory: openStore says so, as the other commands do.)
			if _, err := os.Stat(g.dataDir(ref.name)); err == nil {
				if _, err := runtime.CheckStore(ref.plan, g.dataDir(ref.name)); err != nil {
					return &exitError{ExitFailure, fmt.Errorf("%w (nothing was replayed)", err)}
				}
			}
			s, err := g.openStore(ref.name)
			if err != nil {
				return err
			}
			defer s.Close()
			r, k, err := s.ReplayDeadLetters(f.Name, inputs)
			if err != nil {
				// Only the error: what did move (committed) is part of it.
				if r > 0 || k > 0 {
					err = fmt.Errorf("replayed %d dead letter(s) of %s (kept %d), then: %w", r, f.Name, k, err)
				}
				return &exitError{ExitFailure, err}
			}
			if g.asJSON {
				return g.printJSON(map[string]int{"replayed": r, "kept": k})
			}
			fmt.Fprintf(g.stdout, "replayed %d dead letter(s) of %s; kept %d (not from a current input, or truncated)\n", r, f.Name, k)
			return nil
		},
	}
	g.addJSON(ls)
	g.addJSON(replay)
	c.AddCommand(ls, replay)
	return c
}

// tailErr explains a failed queue tail: an unknown queue with the app's
// queues, a partition the queue does not have as a bad --partition (exit
// 2, as the HTTP API's 400), with its partition count.
func tailErr(s *runtime.Store, app, qn string, parts []int, err error) error {
	unknown := errors.Is(err, queue.ErrUnknownQueue)
	if !unknown && (len(parts) == 0 || !errors.Is(err, queue.ErrBadConfig)) {
		return &exitError{ExitFailure, err}
	}
	qs, lerr := s.QueueList()
	if lerr != nil {
		return &exitError{ExitFailure, err}
	}
	var names []string
	for _, q := range qs {
		if q.Name == qn && !unknown {
			return &exitError{ExitUsage, fmt.Errorf("--partition: %s (queue %q has %d partitions)", strings.TrimPrefix(err.Error(), queue.ErrBadConfig.Error()+": "), qn, q.Partitions)}
		}
		names = append(names, q.Name)
	}
	if !unknown {
		return &exitError{ExitFailure, err}
	}
	return &exitError{ExitFailure, fmt.Errorf("app %q has no queue %q (queues: %s)", app, qn, strings.Join(names, ", "))}
}

// entryPointer reads --from/--to with parse (runtime.ParsePointer,
// runtime.ParseUpperPointer).
func entryPointer(flag, v string, parse func(string) (uint64, error)) (uint64, error) {
	n, err := parse(v)
	if err != nil {
		return 0, &exitError{ExitUsage, fmt.Errorf("--%s: %w", flag, err)}
	}
	return n, nil
}

// instant reads --since/--until (runtime.ParseInstant).
func instant(flag, v string, now time.Time) (time.Time, error) {
	t, err := runtime.ParseInstant(v, now)
	if err != nil {
		return time.Time{}, &exitError{ExitUsage, fmt.Errorf("--%s: %w", flag, err)}
	}
	return t, nil
}
