package expect

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func sample() *Results {
	return &Results{
		PageViews:    map[string]int64{"/": 3, "/a": 2, "/b": 1},
		Visitors:     map[string]int64{"1.2.3.4": 4, "2001:db8::1": 2},
		StatusCounts: map[string]int64{"200": 5, "404": 1},
		BytesPerHour: map[string]int64{"2026-11-21T13": 100, "2026-11-21T14": 0},
		LinesPerHour: map[string]int64{"2026-11-21T13": 4, "2026-11-21T14": 2},
		Malformed:    7,
	}
}

func clone(r *Results) *Results {
	c := *r
	for _, m := range []*map[string]int64{&c.PageViews, &c.Visitors, &c.StatusCounts, &c.BytesPerHour, &c.LinesPerHour} {
		n := map[string]int64{}
		for k, v := range *m {
			n[k] = v
		}
		*m = n
	}
	return &c
}

func TestCompareEachKind(t *testing.T) {
	want := sample()
	if d := Compare(want, clone(want)); len(d) != 0 {
		t.Fatalf("identical results differ: %v", d)
	}
	cases := []struct {
		name   string
		mutate func(*Results)
		want   Diff
	}{
		{"missing page", func(r *Results) { delete(r.PageViews, "/a") }, Diff{"page_views", "/a", Missing, 2, 0}},
		{"extra page", func(r *Results) { r.PageViews["/c"] = 1 }, Diff{"page_views", "/c", Extra, 0, 1}},
		{"extra page with zero", func(r *Results) { r.PageViews["/c"] = 0 }, Diff{"page_views", "/c", Extra, 0, 0}},
		{"duplicate page view", func(r *Results) { r.PageViews["/b"]++ }, Diff{"page_views", "/b", Mismatch, 1, 2}},
		{"lost visit", func(r *Results) { r.Visitors["1.2.3.4"]-- }, Diff{"visitors", "1.2.3.4", Mismatch, 4, 3}},
		{"missing visitor", func(r *Results) { delete(r.Visitors, "2001:db8::1") }, Diff{"visitors", "2001:db8::1", Missing, 2, 0}},
		{"extra visitor", func(r *Results) { r.Visitors["2001:DB8::1"] = 2 }, Diff{"visitors", "2001:DB8::1", Extra, 0, 2}},
		{"status", func(r *Results) { r.StatusCounts["404"] = 2 }, Diff{"status_counts", "404", Mismatch, 1, 2}},
		{"missing status", func(r *Results) { delete(r.StatusCounts, "200") }, Diff{"status_counts", "200", Missing, 5, 0}},
		{"zero-byte hour missing", func(r *Results) { delete(r.BytesPerHour, "2026-11-21T14") }, Diff{"bytes_per_hour", "2026-11-21T14", Missing, 0, 0}},
		{"bytes", func(r *Results) { r.BytesPerHour["2026-11-21T13"] = 200 }, Diff{"bytes_per_hour", "2026-11-21T13", Mismatch, 100, 200}},
		{"extra hour", func(r *Results) { r.BytesPerHour["2026-11-21T15"] = 1 }, Diff{"bytes_per_hour", "2026-11-21T15", Extra, 0, 1}},
		{"0-byte line counted twice", func(r *Results) { r.LinesPerHour["2026-11-21T14"]++ }, Diff{"lines_per_hour", "2026-11-21T14", Mismatch, 2, 3}},
		{"extra hour of lines", func(r *Results) { r.LinesPerHour["2026-11-21T15"] = 1 }, Diff{"lines_per_hour", "2026-11-21T15", Extra, 0, 1}},
		{"malformed", func(r *Results) { r.Malformed = 6 }, Diff{"malformed", "", Mismatch, 7, 6}},
		{"nil map", func(r *Results) {
			r.StatusCounts = nil
			r.BytesPerHour = nil
			r.LinesPerHour = nil
			r.Visitors = nil
			r.PageViews = map[string]int64{"/": 3, "/a": 2}
		},
			Diff{"page_views", "/b", Missing, 1, 0}},
	}
	for _, c := range cases {
		got := clone(want)
		c.mutate(got)
		d := Compare(want, got)
		if len(d) == 0 || d[0] != c.want {
			t.Errorf("%s: diffs %v, want first %v", c.name, d, c.want)
			continue
		}
		if c.name != "nil map" && len(d) != 1 {
			t.Errorf("%s: %d diffs, want 1: %v", c.name, len(d), d)
		}
		var b strings.Builder
		if err := Report(&b, want, got, d, 20); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(b.String(), "FAIL") || !strings.Contains(b.String(), "summary:") {
			t.Errorf("%s: report:\n%s", c.name, b.String())
		}
	}
}

func TestCompareOrderAndLimit(t *testing.T) {
	want := NewResults()
	got := NewResults()
	for i := 0; i < 50; i++ {
		k := "/p" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		want.PageViews[k] = 1
	}
	got.Malformed = 1
	d := Compare(want, got)
	if len(d) != 51 || d[50].Section != "malformed" {
		t.Fatalf("%d diffs, last %v", len(d), d[len(d)-1])
	}
	for i := 1; i < 50; i++ {
		if d[i-1].Key >= d[i].Key {
			t.Fatalf("not sorted: %q then %q", d[i-1].Key, d[i].Key)
		}
	}
	var b strings.Builder
	Report(&b, want, got, d, 10)
	out := b.String()
	if n := strings.Count(out, ": missing (expected 1)"); n != 10 {
		t.Errorf("listed %d differences, want 10:\n%s", n, out)
	}
	for _, s := range []string{"FAIL: 51 difference(s)", "41 more difference(s) not shown", "50 missing, 0 extra, 0 differing", "expected 0, got 1 (+1)"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	b.Reset()
	Report(&b, want, want, nil, 10)
	if !strings.HasPrefix(b.String(), "PASS") {
		t.Errorf("pass report: %s", b.String())
	}
}

func TestJSONRoundTrip(t *testing.T) {
	want := sample()
	want.PageViews[`/a"b\c<&>`] = 1
	want.PageViews["/日本"] = 2
	var b bytes.Buffer
	if err := WriteJSON(&b, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResults(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("round trip: got %+v", got)
	}
	b.Reset()
	WriteJSON(&b, &Results{})
	if got, err := ReadResults(&b); err != nil || len(got.PageViews) != 0 || got.PageViews == nil {
		t.Errorf("empty results: %+v, %v", got, err)
	}
}

func TestReadResults(t *testing.T) {
	const valid = `{"page_views":{"/a":3},"visitors":{"1.2.3.4":3},"status_counts":{"200":3},"bytes_per_hour":{"2026-11-21T13":4567},"lines_per_hour":{"2026-11-21T13":89},"malformed":42}`
	r, err := ReadResults(strings.NewReader(valid))
	if err != nil {
		t.Fatal(err)
	}
	if r.PageViews["/a"] != 3 || r.Malformed != 42 || r.BytesPerHour["2026-11-21T13"] != 4567 || r.LinesPerHour["2026-11-21T13"] != 89 {
		t.Errorf("decoded %+v", r)
	}
	// Member order and white space do not matter.
	if _, err := ReadResults(strings.NewReader(" {\n\"malformed\": 0, \"bytes_per_hour\":{}, \"lines_per_hour\":{}, \"status_counts\":{},\"visitors\":{},\"page_views\":{}}\n")); err != nil {
		t.Errorf("reordered: %v", err)
	}
	bad := map[string]string{
		"not json":          `page_views`,
		"array":             `[]`,
		"missing member":    `{"page_views":{},"visitors":{},"status_counts":{},"malformed":0}`,
		"no lines_per_hour": `{"page_views":{},"visitors":{},"status_counts":{},"bytes_per_hour":{},"malformed":0}`,
		"unknown member":    `{"page_views":{},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0,"lines":1}`,
		"duplicate member":  `{"page_views":{},"page_views":{},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"duplicate key":     `{"page_views":{"/a":1,"/a":2},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"null map":          `{"page_views":null,"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"negative":          `{"page_views":{"/a":-1},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"float":             `{"page_views":{"/a":1.5},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"exponent":          `{"page_views":{"/a":1e3},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"string count":      `{"page_views":{"/a":"1"},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"too big":           `{"page_views":{"/a":9223372036854775808},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"malformed object":  `{"page_views":{},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":{}}`,
		"nested":            `{"page_views":{"/a":{}},"visitors":{},"status_counts":{},"bytes_per_hour":{},"lines_per_hour":{},"malformed":0}`,
		"trailing data":     valid + `{}`,
		"truncated":         valid[:len(valid)-1],
		"empty":             ``,
	}
	for name, in := range bad {
		if r, err := ReadResults(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted: %+v", name, r)
		}
	}
}
