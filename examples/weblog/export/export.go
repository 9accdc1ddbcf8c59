package main

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/planner"
)

// Store is what Export reads from the final state of a stopped app: the
// smallest interface over the runtime's state and dead-letter queues.
type Store interface {
	// ScanCounters calls fn for every counter of the flowlet's counter
	// table, in any order.
	ScanCounters(flowlet, table string, fn func(key []byte, count int64) error) error
	// ScanTable calls fn for every entry of the flowlet's key-value table.
	ScanTable(flowlet, table string, fn func(key, value []byte) error) error
	// DLQLen returns the number of entries in the flowlet's dead-letter queue.
	DLQLen(flowlet string) (int64, error)
	// DeadLetters calls fn with the payload of every entry in the flowlet's
	// dead-letter queue.
	DeadLetters(flowlet string, fn func(payload []byte) error) error
}

// Roles are the app's flowlets by what they compute, found by type so
// that an app may name them as it likes.
// ParserPlugin is the last element of the parser plugin's path.
const ParserPlugin = "weblogparser"

type Roles struct {
	Parsers []string
	// Readers are the flowlets that feed a parser: a line a reader
	// dead-letters (file_source: one over its max_line_bytes, at most
	// 1 MiB, so far past the 64 KiB of a well-formed line) never reaches
	// a parser but is a malformed line of the log all the same.
	Readers                                         []string
	PageViews, Visitors, StatusCounts, BytesPerHour string
}

// FindRoles finds the weblog flowlets of plan. Each counting type must
// appear exactly once (two would count every event twice); every parser's
// dead-letter queue is counted. A plugin flowlet whose plugin is the
// parser plugin (a path ending in weblogparser: examples/plugins/
// weblogparser or its binary) is a parser.
func FindRoles(plan *planner.Plan) (Roles, error) {
	var r Roles
	byType := map[string][]string{}
	for _, f := range plan.Flowlets {
		typ := f.Type
		if f.Plugin != "" && path.Base(filepath.ToSlash(f.Plugin)) == ParserPlugin {
			typ = flowlets.TypeParser
		}
		byType[typ] = append(byType[typ], f.Name)
	}
	r.Parsers = byType[flowlets.TypeParser]
	if len(r.Parsers) == 0 {
		return r, fmt.Errorf("app %s has no flowlet of type %s", plan.App, flowlets.TypeParser)
	}
	var errs []string
	for _, x := range []struct {
		typ string
		dst *string
	}{
		{flowlets.TypePageViews, &r.PageViews},
		{flowlets.TypeUniqueVisitors, &r.Visitors},
		{flowlets.TypeStatusCounts, &r.StatusCounts},
		{flowlets.TypeBytesPerHour, &r.BytesPerHour},
	} {
		switch names := byType[x.typ]; len(names) {
		case 1:
			*x.dst = names[0]
		case 0:
			errs = append(errs, fmt.Sprintf("no flowlet of type %s", x.typ))
		default:
			errs = append(errs, fmt.Sprintf("%d flowlets of type %s (%s); want one", len(names), x.typ, strings.Join(names, ", ")))
		}
	}
	if errs != nil {
		return r, fmt.Errorf("app %s: %s", plan.App, strings.Join(errs, "; "))
	}
	for _, c := range plan.Connections {
		if slices.Contains(r.Parsers, c.To) && !slices.Contains(r.Readers, c.From) {
			r.Readers = append(r.Readers, c.From)
		}
	}
	return r, nil
}

// Export reads the results of the app's flowlets from s.
func Export(r Roles, s Store) (*flowlets.Results, error) {
	res := &flowlets.Results{}
	var err error
	if res.PageViews, err = counts(s, r.PageViews, flowlets.ViewsCounters); err != nil {
		return nil, err
	}
	if res.Visitors, err = counts(s, r.Visitors, flowlets.HitsCounters); err != nil {
		return nil, err
	}
	if res.StatusCounts, err = counts(s, r.StatusCounts, flowlets.StatusCounters); err != nil {
		return nil, err
	}
	// An hour exists when it has lines; its bytes may sum to 0, and a
	// counter that only ever had 0 added may have no key.
	lines, err := counts(s, r.BytesPerHour, flowlets.LinesCounters)
	if err != nil {
		return nil, err
	}
	nbytes, err := counts(s, r.BytesPerHour, flowlets.BytesCounters)
	if err != nil {
		return nil, err
	}
	res.BytesPerHour, res.LinesPerHour = map[string]int64{}, map[string]int64{}
	for h, n := range lines {
		if n < 0 {
			return nil, fmt.Errorf("%s: hour %q has %d lines", r.BytesPerHour, h, n)
		}
		if n > 0 {
			res.BytesPerHour[h] = nbytes[h]
			res.LinesPerHour[h] = n
		}
	}
	for h, n := range nbytes {
		if lines[h] <= 0 && n != 0 {
			return nil, fmt.Errorf("%s: hour %q has %d bytes but no lines", r.BytesPerHour, h, n)
		}
	}
	for _, p := range slices.Concat(r.Parsers, r.Readers) {
		n, err := s.DLQLen(p)
		if err != nil {
			return nil, err
		}
		res.Malformed += n
	}
	return res, nil
}

// WriteDeadLetters writes the payload of every dead letter of the parsers
// to w, each followed by "\n": for a parser, the malformed lines, so the
// file reads back as a log of exactly those lines. It returns their number.
func WriteDeadLetters(r Roles, s Store, w io.Writer) (int64, error) {
	var n int64
	for _, p := range r.Parsers {
		err := s.DeadLetters(p, func(payload []byte) error {
			if bytes.IndexByte(payload, '\n') >= 0 {
				return fmt.Errorf("%s: dead letter holds a newline: not a line", p)
			}
			n++
			_, err := w.Write(append(payload[:len(payload):len(payload)], '\n'))
			return err
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// counts reads a counter table, resolving long keys through the flowlet's
// long-key table.
func counts(s Store, flowlet, table string) (map[string]int64, error) {
	out := map[string]int64{}
	var long []string
	err := s.ScanCounters(flowlet, table, func(key []byte, n int64) error {
		k := string(key)
		if _, dup := out[k]; dup {
			return fmt.Errorf("%s: counters %q: key %q listed twice", flowlet, table, key)
		}
		out[k] = n
		if flowlets.IsLongKey(key) {
			long = append(long, k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: counters %q: %w", flowlet, table, err)
	}
	if len(long) == 0 {
		return out, nil
	}
	values := map[string]string{}
	err = s.ScanTable(flowlet, flowlets.LongKeysTable, func(key, value []byte) error {
		values[string(key)] = string(value)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: table %q: %w", flowlet, flowlets.LongKeysTable, err)
	}
	sort.Strings(long)
	for _, k := range long {
		v, ok := values[k]
		if !ok {
			return nil, fmt.Errorf("%s: counters %q: long key %q has no value in table %q", flowlet, table, k, flowlets.LongKeysTable)
		}
		if ck, _ := flowlets.CounterKey([]byte(v)); string(ck) != k {
			return nil, fmt.Errorf("%s: table %q: value of %q does not hash to it", flowlet, flowlets.LongKeysTable, k)
		}
		if _, dup := out[v]; dup {
			return nil, fmt.Errorf("%s: counters %q: %q counted under its long key and itself", flowlet, table, v[:32])
		}
		out[v] = out[k]
		delete(out, k)
	}
	return out, nil
}
