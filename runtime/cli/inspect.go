package cli

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
)

func (g *globals) validateCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "validate APP.yaml",
		Aliases: []string{"lint"},
		Short:   "check an app file; print every problem as file:line:col: message",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			plan, err := runtime.ParseFile(args[0])
			if err == nil && runtime.HasPlugins(plan) {
				// Build, start and describe every plugin: build failures
				// and handshake errors are the app's errors too.
				err = runtime.CheckPlugins(cmd.Context(), plan, runtime.Options{DataDir: g.dataDir(plan.App),
					AppDir: filepath.Dir(args[0]), PluginCacheDir: g.pluginCache})
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
					Valid  bool `json:"valid"`
					Errors []ej `json:"errors"`
				}{Valid: err == nil, Errors: []ej{}}
				if err != nil && !errorsAs(err, &el) {
					return &exitError{ExitFailure, err}
				}
				for _, e := range el {
					out.Errors = append(out.Errors, ej{e.File, e.Line, e.Col, e.Msg})
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
			return nil
		},
	}
	g.addJSON(c)
	return c
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

// bytesJSON is a payload in JSON: text when it is valid UTF-8, base64 otherwise.
type bytesJSON struct {
	Text   *string `json:"text,omitempty"`
	Base64 *string `json:"base64,omitempty"`
}

func payloadJSON(b []byte) bytesJSON {
	if utf8.Valid(b) {
		s := string(b)
		return bytesJSON{Text: &s}
	}
	s := base64.StdEncoding.EncodeToString(b)
	return bytesJSON{Base64: &s}
}

// printable quotes b for text output when it is not plain printable UTF-8.
func printable(b []byte) string {
	if utf8.Valid(b) {
		ok := true
		for _, r := range string(b) {
			if r < 0x20 || r == 0x7f {
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
	var prefix string
	var limit int
	get := &cobra.Command{
		Use:   "get APP FLOWLET [TABLE] [KEY]",
		Short: "without TABLE: list the flowlet's tables; with TABLE and KEY: one value or count",
		Args:  cobra.RangeArgs(2, 4),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 3 {
				return g.stateScan(args[0], args[1], args[2], counters, "", limit)
			}
			return g.stateGet(args, counters)
		},
	}
	scan := &cobra.Command{
		Use:   "scan APP FLOWLET [TABLE]",
		Short: "list the keys and values of a table (every table without TABLE)",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			table := ""
			if len(args) == 3 {
				table = args[2]
			}
			return g.stateScan(args[0], args[1], table, counters, prefix, limit)
		},
	}
	for _, sc := range []*cobra.Command{get, scan} {
		sc.Flags().BoolVar(&counters, "counters", false, "TABLE is a counter table (default: guessed from the stored data)")
		g.addJSON(sc)
	}
	scan.Flags().StringVar(&prefix, "prefix", "", "only keys with this prefix")
	scan.Flags().IntVarP(&limit, "limit", "n", 0, "at most this many keys per table (0 = all)")
	c.AddCommand(get, scan)
	return c
}

type tableJSON struct {
	Name    string        `json:"name"`
	Kind    string        `json:"kind"`
	Entries []stateKVJSON `json:"entries"`
}

type stateKVJSON struct {
	Key   bytesJSON  `json:"key"`
	Value *bytesJSON `json:"value,omitempty"`
	Count *int64     `json:"count,omitempty"`
}

func (g *globals) kindOf(s *runtime.Store, app, fl, table string, counters bool) (string, error) {
	if counters {
		return "counters", nil
	}
	ts, err := s.Tables(app, fl)
	if err != nil {
		return "", err
	}
	kind := ""
	for _, t := range ts {
		if t.Name == table && (kind == "" || t.Kind == "table") {
			kind = t.Kind
		}
	}
	if kind == "" {
		return "", &exitError{ExitFailure, fmt.Errorf("flowlet %q has no table %q with data (see: flowrun state get %s %s)", fl, table, app, fl)}
	}
	return kind, nil
}

func (g *globals) stateGet(args []string, counters bool) error {
	ref, err := resolveApp(args[0])
	if err != nil {
		return err
	}
	s, err := g.openStore(ref.name)
	if err != nil {
		return err
	}
	defer s.Close()
	fl := args[1]
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
	var out stateKVJSON
	out.Key = payloadJSON([]byte(key))
	found := true
	err = s.View(ref.name, fl, func(r runtime.StateReader) error {
		if kind == "counters" {
			n, err := r.Counters(table).Get([]byte(key))
			out.Count = &n
			return err
		}
		v, ok, err := r.Table(table).Get([]byte(key))
		found = ok
		if ok {
			pj := payloadJSON(v)
			out.Value = &pj
		}
		return err
	})
	if err != nil {
		return &exitError{ExitFailure, err}
	}
	if !found {
		if g.asJSON {
			g.printJSON(out)
		}
		return &exitError{ExitFailure, fmt.Errorf("table %q of flowlet %q has no key %q", table, fl, key)}
	}
	if g.asJSON {
		return g.printJSON(out)
	}
	if out.Count != nil {
		fmt.Fprintln(g.stdout, *out.Count)
	} else if out.Value.Text != nil {
		fmt.Fprintln(g.stdout, *out.Value.Text)
	} else {
		fmt.Fprintln(g.stdout, strconv.Quote(mustB64(*out.Value.Base64)))
	}
	return nil
}

func mustB64(s string) string {
	b, _ := base64.StdEncoding.DecodeString(s)
	return string(b)
}

func (g *globals) stateScan(appArg, fl, table string, counters bool, prefix string, limit int) error {
	ref, err := resolveApp(appArg)
	if err != nil {
		return err
	}
	s, err := g.openStore(ref.name)
	if err != nil {
		return err
	}
	defer s.Close()
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
	var out []tableJSON
	err = s.View(ref.name, fl, func(r runtime.StateReader) error {
		for _, t := range tables {
			tj := tableJSON{Name: t.Name, Kind: t.Kind, Entries: []stateKVJSON{}}
			opts := flowlet.ScanOptions{Prefix: []byte(prefix), Limit: limit}
			if t.Kind == "counters" {
				it := r.Counters(t.Name).Scan(opts)
				for it.Next() {
					n := it.Count()
					tj.Entries = append(tj.Entries, stateKVJSON{Key: payloadJSON(it.Key()), Count: &n})
				}
				err := it.Err()
				it.Close()
				if err != nil {
					return err
				}
			} else {
				it := r.Table(t.Name).Scan(opts)
				for it.Next() {
					v := payloadJSON(it.Value())
					tj.Entries = append(tj.Entries, stateKVJSON{Key: payloadJSON(it.Key()), Value: &v})
				}
				err := it.Err()
				it.Close()
				if err != nil {
					return err
				}
			}
			out = append(out, tj)
		}
		return nil
	})
	if err != nil {
		return &exitError{ExitFailure, err}
	}
	if g.asJSON {
		if out == nil {
			out = []tableJSON{}
		}
		return g.printJSON(out)
	}
	for _, t := range out {
		if len(tables) > 1 {
			fmt.Fprintf(g.stdout, "# %s (%s)\n", t.Name, t.Kind)
		}
		for _, e := range t.Entries {
			k := printable(jsonBytes(e.Key))
			if e.Count != nil {
				fmt.Fprintf(g.stdout, "%s\t%d\n", k, *e.Count)
			} else {
				fmt.Fprintf(g.stdout, "%s\t%s\n", k, printable(jsonBytes(*e.Value)))
			}
		}
	}
	return nil
}

func jsonBytes(b bytesJSON) []byte {
	if b.Text != nil {
		return []byte(*b.Text)
	}
	return []byte(mustB64(*b.Base64))
}

func (g *globals) queueCmd() *cobra.Command {
	c := &cobra.Command{Use: "queue", Short: "inspect an app's queues (the app must not be running)"}
	ls := &cobra.Command{
		Use:   "ls APP",
		Short: "list queues with depth and per-group lag",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := resolveApp(args[0])
			if err != nil {
				return err
			}
			s, err := g.openStore(ref.name)
			if err != nil {
				return err
			}
			defer s.Close()
			qs, err := s.Queues()
			if err != nil {
				return &exitError{ExitFailure, err}
			}
			type gj struct {
				Name      string `json:"name"`
				Strategy  string `json:"strategy"`
				Instances int    `json:"instances"`
				Lag       int64  `json:"lag"`
				Consumed  int64  `json:"consumed"`
			}
			type qj struct {
				Name       string `json:"name"`
				Partitions int    `json:"partitions"`
				Events     int64  `json:"events"`
				Bytes      int64  `json:"bytes"`
				Groups     []gj   `json:"groups"`
			}
			out := []qj{}
			for _, q := range qs {
				j := qj{Name: q.Name, Partitions: q.Config.Partitions, Events: q.Events, Bytes: q.Bytes, Groups: []gj{}}
				for _, gr := range q.Groups {
					j.Groups = append(j.Groups, gj{gr.Name, string(gr.Strategy), gr.Instances, gr.Lag, gr.Consumed})
				}
				out = append(out, j)
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
	tail := &cobra.Command{
		Use:   "tail APP QUEUE",
		Short: "show stored entries of a queue (committed, not yet evicted)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := resolveApp(args[0])
			if err != nil {
				return err
			}
			key := ""
			if ref.plan != nil {
				if q := ref.plan.Queue(args[1]); q != nil {
					key = q.Key
				}
			}
			s, err := g.openStore(ref.name)
			if err != nil {
				return err
			}
			defer s.Close()
			var es []runtime.QueueEntry
			if err := s.Scan(args[1], key, 0, func(e runtime.QueueEntry) bool { es = append(es, e); return true }); err != nil {
				return &exitError{ExitFailure, err}
			}
			// Newest last, by enqueue time then id; keep the last n.
			sort.SliceStable(es, func(i, j int) bool { return es[i].Enqueued.Before(es[j].Enqueued) })
			if n > 0 && len(es) > n {
				es = es[len(es)-n:]
			}
			type ej struct {
				ID        string             `json:"id"`
				Enqueued  time.Time          `json:"enqueued"`
				Keys      []flowlet.KeyValue `json:"keys,omitempty"`
				EventTime *time.Time         `json:"event_time,omitempty"`
				TraceID   string             `json:"trace_id,omitempty"`
				Payload   bytesJSON          `json:"payload"`
			}
			if g.asJSON {
				out := []ej{}
				for _, e := range es {
					j := ej{ID: e.ID, Enqueued: e.Enqueued, Keys: e.Keys, TraceID: e.TraceID, Payload: payloadJSON(e.Payload)}
					if !e.EventTime.IsZero() {
						t := e.EventTime
						j.EventTime = &t
					}
					out = append(out, j)
				}
				return g.printJSON(out)
			}
			for _, e := range es {
				ks := ""
				for _, kv := range e.Keys {
					ks += " " + kv.Name + "=" + printable([]byte(kv.Value))
				}
				fmt.Fprintf(g.stdout, "%s%s\t%s\n", e.ID, ks, printable(e.Payload))
			}
			return nil
		},
	}
	tail.Flags().IntVarP(&n, "lines", "n", 10, "show the last n entries (0 = all)")
	g.addJSON(ls)
	g.addJSON(tail)
	c.AddCommand(ls, tail)
	return c
}

type deadJSON struct {
	Flowlet   string             `json:"flowlet"`
	Input     string             `json:"input"`
	EventID   string             `json:"event_id"`
	Error     string             `json:"error"`
	Attempts  int                `json:"attempts"`
	Time      time.Time          `json:"time"`
	Keys      []flowlet.KeyValue `json:"keys,omitempty"`
	EventTime *time.Time         `json:"event_time,omitempty"`
	TraceID   string             `json:"trace_id,omitempty"`
	Payload   bytesJSON          `json:"payload"`
}

func (g *globals) dlqCmd() *cobra.Command {
	c := &cobra.Command{Use: "dlq", Short: "inspect and replay dead-letter queues (the app must not be running)"}
	var n int
	ls := &cobra.Command{
		Use:   "ls APP [FLOWLET]",
		Short: "list dead letters (of every flowlet without FLOWLET)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := resolveApp(args[0])
			if err != nil {
				return err
			}
			s, err := g.openStore(ref.name)
			if err != nil {
				return err
			}
			defer s.Close()
			var fls []string
			if len(args) == 2 {
				fls = []string{args[1]}
			} else {
				qs, err := s.Queues()
				if err != nil {
					return err
				}
				for _, q := range qs {
					if len(q.Name) > 4 && q.Name[len(q.Name)-4:] == "."+runtime.DLQOutput {
						fls = append(fls, q.Name[:len(q.Name)-4])
					}
				}
			}
			out := []deadJSON{}
			for _, fl := range fls {
				err := s.DeadLetters(fl, n, func(d runtime.DeadLetter) bool {
					j := deadJSON{Flowlet: d.Flowlet, Input: d.Input, EventID: d.EventID, Error: d.Error, Attempts: d.Attempts,
						Time: d.Time, Keys: d.Keys, TraceID: d.TraceID, Payload: payloadJSON(d.Payload)}
					if !d.EventTime.IsZero() {
						t := d.EventTime
						j.EventTime = &t
					}
					out = append(out, j)
					return true
				})
				if err != nil {
					return &exitError{ExitFailure, err}
				}
			}
			if g.asJSON {
				return g.printJSON(out)
			}
			for _, d := range out {
				fmt.Fprintf(g.stdout, "%s\t%s\t%s\tattempts=%d\terror=%s\tpayload=%s\n", d.Flowlet, d.Input, d.EventID, d.Attempts,
					printable([]byte(d.Error)), printable(jsonBytes(d.Payload)))
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
			s, err := g.openStore(ref.name)
			if err != nil {
				return err
			}
			defer s.Close()
			r, k, err := s.ReplayDeadLetters(f.Name, inputs)
			if g.asJSON {
				g.printJSON(map[string]int{"replayed": r, "kept": k})
			} else {
				fmt.Fprintf(g.stdout, "replayed %d dead letter(s) of %s; kept %d (not from a current input)\n", r, f.Name, k)
			}
			if err != nil {
				return &exitError{ExitFailure, err}
			}
			return nil
		},
	}
	g.addJSON(ls)
	g.addJSON(replay)
	c.AddCommand(ls, replay)
	return c
}
