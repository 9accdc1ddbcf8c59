package expect

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Results is the canonical result set, in the JSON format documented in the
// README:
//
//	{"page_views":{...},"visitors":{...},"status_counts":{...},"bytes_per_hour":{...},"lines_per_hour":{...},"malformed":N}
//
// LinesPerHour is there because bytes alone miss a line of 0 bytes (a 304)
// counted twice, lost or counted in the wrong hour.
type Results struct {
	PageViews    map[string]int64 `json:"page_views"`
	Visitors     map[string]int64 `json:"visitors"`
	StatusCounts map[string]int64 `json:"status_counts"`
	BytesPerHour map[string]int64 `json:"bytes_per_hour"`
	LinesPerHour map[string]int64 `json:"lines_per_hour"`
	Malformed    int64            `json:"malformed"`
}

// NewResults returns empty results (all maps non-nil).
func NewResults() *Results {
	return &Results{
		PageViews:    map[string]int64{},
		Visitors:     map[string]int64{},
		StatusCounts: map[string]int64{},
		BytesPerHour: map[string]int64{},
		LinesPerHour: map[string]int64{},
	}
}

// Stats are diagnostics about a computation; they are not part of the
// canonical results.
type Stats struct {
	Lines      int64
	WellFormed int64
	ByReason   [numReasons]int64 // malformed lines by Reason (ByReason[OK] == WellFormed)
}

// NumReasons is the number of Reason values (including OK).
const NumReasons = int(numReasons)

// Accumulator folds lines into Results.
type Accumulator struct {
	res   *Results
	hours map[int64]hourTotals
	stats Stats
}

type hourTotals struct{ bytes, lines int64 }

// NewAccumulator returns an empty accumulator.
func NewAccumulator() *Accumulator {
	return &Accumulator{res: NewResults(), hours: map[int64]hourTotals{}}
}

// Add accounts for one line (without its "\n").
func (a *Accumulator) Add(line []byte) {
	rec, reason := ParseLine(line)
	a.addParsed(rec, reason)
}

func (a *Accumulator) addParsed(rec Record, reason Reason) {
	a.stats.Lines++
	a.stats.ByReason[reason]++
	if reason != OK {
		a.res.Malformed++
		return
	}
	a.stats.WellFormed++
	a.res.PageViews[rec.Path]++
	a.res.Visitors[rec.Host]++
	a.res.StatusCounts[strconv.Itoa(rec.Status)]++
	h := a.hours[rec.Hour]
	h.bytes += rec.Bytes
	h.lines++
	a.hours[rec.Hour] = h
}

// Results returns the results accumulated so far.
func (a *Accumulator) Results() *Results {
	a.res.BytesPerHour = make(map[string]int64, len(a.hours))
	a.res.LinesPerHour = make(map[string]int64, len(a.hours))
	for h, t := range a.hours {
		a.res.BytesPerHour[HourKey(h)] = t.bytes
		a.res.LinesPerHour[HourKey(h)] = t.lines
	}
	return a.res
}

// Stats returns diagnostics accumulated so far.
func (a *Accumulator) Stats() Stats { return a.stats }

// Compute reads a whole log and returns the expected results. Lines are the
// byte sequences separated by "\n"; a final line without "\n" counts.
func Compute(r io.Reader) (*Results, Stats, error) {
	a := NewAccumulator()
	// The buffer is much larger than MaxLineLen+2, so a line that does not
	// fit in it is certainly too long and does not need to be kept.
	br := bufio.NewReaderSize(r, 4*MaxLineLen)
	skipping := false // inside a line that did not fit in the buffer
	for {
		chunk, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			skipping = true
			continue
		}
		if err != nil && err != io.EOF {
			return nil, Stats{}, err
		}
		if len(chunk) > 0 || skipping {
			if skipping {
				a.addParsed(Record{}, TooLong)
				skipping = false
			} else {
				a.Add(bytes.TrimSuffix(chunk, []byte{'\n'}))
			}
		}
		if err == io.EOF {
			break
		}
	}
	return a.Results(), a.Stats(), nil
}

// WriteJSON writes res in the canonical format (indented, keys sorted).
func WriteJSON(w io.Writer, res *Results) error {
	c := *res
	for _, m := range []*map[string]int64{&c.PageViews, &c.Visitors, &c.StatusCounts, &c.BytesPerHour, &c.LinesPerHour} {
		if *m == nil {
			*m = map[string]int64{}
		}
	}
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// Section names, in canonical order.
var Sections = []string{"page_views", "visitors", "status_counts", "bytes_per_hour", "lines_per_hour", "malformed"}

func (r *Results) section(name string) map[string]int64 {
	switch name {
	case "page_views":
		return r.PageViews
	case "visitors":
		return r.Visitors
	case "status_counts":
		return r.StatusCounts
	case "bytes_per_hour":
		return r.BytesPerHour
	case "lines_per_hour":
		return r.LinesPerHour
	}
	return nil
}

// ReadResults decodes results in the canonical format, strictly: the top
// level must be an object with exactly the six members, each map member an
// object whose values are integers in 0..2^63-1, no duplicate keys at any
// level, "malformed" an integer in the same range, nothing after the object.
func ReadResults(r io.Reader) (*Results, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	res := &Results{}
	if err := expectDelim(dec, '{', "top level"); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for dec.More() {
		name, err := stringToken(dec, "member name")
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, fmt.Errorf("duplicate member %q", name)
		}
		seen[name] = true
		switch name {
		case "page_views", "visitors", "status_counts", "bytes_per_hour", "lines_per_hour":
			m, err := readCounts(dec, name)
			if err != nil {
				return nil, err
			}
			switch name {
			case "page_views":
				res.PageViews = m
			case "visitors":
				res.Visitors = m
			case "status_counts":
				res.StatusCounts = m
			case "bytes_per_hour":
				res.BytesPerHour = m
			case "lines_per_hour":
				res.LinesPerHour = m
			}
		case "malformed":
			n, err := countToken(dec, "malformed")
			if err != nil {
				return nil, err
			}
			res.Malformed = n
		default:
			return nil, fmt.Errorf("unknown member %q", name)
		}
	}
	if err := expectDelim(dec, '}', "top level"); err != nil {
		return nil, err
	}
	for _, s := range Sections {
		if !seen[s] {
			return nil, fmt.Errorf("missing member %q", s)
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, errors.New("data after the top-level object")
		}
		return nil, err
	}
	return res, nil
}

func expectDelim(dec *json.Decoder, d json.Delim, where string) error {
	t, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if got, ok := t.(json.Delim); !ok || got != d {
		return fmt.Errorf("%s: expected %q, got %v", where, string(d), t)
	}
	return nil
}

func stringToken(dec *json.Decoder, where string) (string, error) {
	t, err := dec.Token()
	if err != nil {
		return "", fmt.Errorf("%s: %w", where, err)
	}
	s, ok := t.(string)
	if !ok {
		return "", fmt.Errorf("%s: expected a string, got %v", where, t)
	}
	return s, nil
}

func countToken(dec *json.Decoder, where string) (int64, error) {
	t, err := dec.Token()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", where, err)
	}
	n, ok := t.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%s: expected an integer, got %v", where, t)
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%s: expected an integer in 0..2^63-1, got %s", where, n)
	}
	return v, nil
}

func readCounts(dec *json.Decoder, name string) (map[string]int64, error) {
	if err := expectDelim(dec, '{', name); err != nil {
		return nil, err
	}
	m := map[string]int64{}
	for dec.More() {
		k, err := stringToken(dec, name+" key")
		if err != nil {
			return nil, err
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%s: duplicate key %q", name, k)
		}
		v, err := countToken(dec, name+"["+strconv.Quote(k)+"]")
		if err != nil {
			return nil, err
		}
		m[k] = v
	}
	if err := expectDelim(dec, '}', name); err != nil {
		return nil, err
	}
	return m, nil
}
