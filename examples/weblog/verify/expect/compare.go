package expect

import (
	"fmt"
	"io"
	"sort"
	"strconv"
)

// DiffKind classifies a difference between expected and actual results.
type DiffKind uint8

// Kinds of differences.
const (
	Missing  DiffKind = iota + 1 // key expected but absent from the actual results
	Extra                        // key present in the actual results but not expected
	Mismatch                     // key (or "malformed") present in both with different values
)

func (k DiffKind) String() string {
	switch k {
	case Missing:
		return "missing"
	case Extra:
		return "extra"
	case Mismatch:
		return "mismatch"
	}
	return "diff(" + strconv.Itoa(int(k)) + ")"
}

// Diff is one difference. For the "malformed" section Key is empty.
type Diff struct {
	Section string
	Key     string
	Kind    DiffKind
	Want    int64 // expected value (0 for Extra)
	Got     int64 // actual value (0 for Missing)
}

func (d Diff) String() string {
	name := d.Section
	if d.Section != "malformed" {
		name += "[" + strconv.Quote(d.Key) + "]"
	}
	switch d.Kind {
	case Missing:
		return fmt.Sprintf("%s: missing (expected %d)", name, d.Want)
	case Extra:
		return fmt.Sprintf("%s: extra (got %d)", name, d.Got)
	default:
		return fmt.Sprintf("%s: expected %d, got %d (%+d)", name, d.Want, d.Got, d.Got-d.Want)
	}
}

// Compare returns all differences between want and got, section by section
// in canonical order, keys sorted within a section. A nil map is treated as
// empty. A key with value 0 is still a key: for example page_views {"/a":0}
// when "/a" is not expected is an Extra difference.
func Compare(want, got *Results) []Diff {
	var diffs []Diff
	for _, s := range Sections {
		if s == "malformed" {
			if want.Malformed != got.Malformed {
				diffs = append(diffs, Diff{Section: s, Kind: Mismatch, Want: want.Malformed, Got: got.Malformed})
			}
			continue
		}
		w, g := want.section(s), got.section(s)
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			wv, inW := w[k]
			gv, inG := g[k]
			switch {
			case !inG:
				diffs = append(diffs, Diff{Section: s, Key: k, Kind: Missing, Want: wv})
			case !inW:
				diffs = append(diffs, Diff{Section: s, Key: k, Kind: Extra, Got: gv})
			case wv != gv:
				diffs = append(diffs, Diff{Section: s, Key: k, Kind: Mismatch, Want: wv, Got: gv})
			}
		}
	}
	return diffs
}

// Report writes a human-readable report: "PASS ..." when diffs is empty,
// otherwise "FAIL ...", up to limit differences (limit <= 0: all), and a
// per-section summary.
func Report(w io.Writer, want, got *Results, diffs []Diff, limit int) error {
	ew := &errWriter{w: w}
	if len(diffs) == 0 {
		var total int64
		for _, v := range want.StatusCounts {
			total += v
		}
		ew.printf("PASS: %d well-formed lines, %d malformed; %d paths, %d visitors, %d status codes, %d hours\n",
			total, want.Malformed, len(want.PageViews), len(want.Visitors), len(want.StatusCounts), len(want.BytesPerHour))
		return ew.err
	}
	ew.printf("FAIL: %d difference(s)\n", len(diffs))
	for i, d := range diffs {
		if limit > 0 && i >= limit {
			ew.printf("  ... %d more difference(s) not shown (-limit %d)\n", len(diffs)-limit, limit)
			break
		}
		ew.printf("  %s\n", d)
	}
	ew.printf("summary:\n")
	for _, s := range Sections {
		var missing, extra, mismatch int
		for _, d := range diffs {
			if d.Section != s {
				continue
			}
			switch d.Kind {
			case Missing:
				missing++
			case Extra:
				extra++
			case Mismatch:
				mismatch++
			}
		}
		if s == "malformed" {
			if mismatch == 0 {
				ew.printf("  %-15s ok (%d)\n", s+":", want.Malformed)
			} else {
				ew.printf("  %-15s expected %d, got %d (%+d)\n", s+":", want.Malformed, got.Malformed, got.Malformed-want.Malformed)
			}
			continue
		}
		wm, gm := want.section(s), got.section(s)
		wt, gt := sum(wm), sum(gm)
		if missing+extra+mismatch == 0 {
			ew.printf("  %-15s ok (%d keys, total %d)\n", s+":", len(wm), wt)
			continue
		}
		ew.printf("  %-15s %d missing, %d extra, %d differing; expected %d keys / total %d, got %d keys / total %d (%+d)\n",
			s+":", missing, extra, mismatch, len(wm), wt, len(gm), gt, gt-wt)
	}
	return ew.err
}

func sum(m map[string]int64) int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
