package main

import (
	"bytes"
	"crypto/sha256"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/examples/weblog/verify/expect"
)

func testConfig(lines int, malformed float64, seed uint64) config {
	return config{
		lines: lines, malformed: malformed, seed: seed,
		start: time.Date(2026, 11, 21, 13, 20, 0, 0, time.FixedZone("", 5*3600+1800)),
		span:  6 * time.Hour, ips: 500, paths: 300, crlf: 0.001,
	}
}

func gen(t *testing.T, cfg config) ([]byte, [numKinds]int) {
	t.Helper()
	var b bytes.Buffer
	counts, err := generate(&b, cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), counts
}

func TestDeterministic(t *testing.T) {
	cfg := testConfig(20000, 0.05, 42)
	a, _ := gen(t, cfg)
	b, _ := gen(t, cfg)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed, different output")
	}
	cfg.seed = 43
	c, _ := gen(t, cfg)
	if bytes.Equal(a, c) {
		t.Fatal("different seeds, same output")
	}
	// Through the command line and a file, too.
	dir := t.TempDir()
	var sums [2][32]byte
	for i := range sums {
		out := filepath.Join(dir, "a.log")
		if code := run([]string{"-lines", "3000", "-seed", "9", "-out", out}, os.Stdout, os.Stderr); code != 0 {
			t.Fatalf("exit %d", code)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		sums[i] = sha256.Sum256(data)
	}
	if sums[0] != sums[1] {
		t.Fatal("command output differs between runs")
	}
}

// TestIntentMatchesVerifier checks every line: the generator's intent
// (well-formed or a malformed kind) must agree with the verifier, the
// malformed share must be as requested, and every malformed kind must occur.
func TestIntentMatchesVerifier(t *testing.T) {
	for _, tc := range []struct {
		lines     int
		malformed float64
		seed      uint64
	}{{30000, 0.02, 1}, {20000, 0.3, 2}, {5000, 0, 3}, {200, 1, 4}, {11, 1, 5}, {1, 0.5, 6}, {0, 0.02, 7}} {
		cfg := testConfig(tc.lines, tc.malformed, tc.seed)
		g := newGenerator(cfg)
		var counts [numKinds]int
		for i := 0; i < cfg.lines; i++ {
			line, k := g.next()
			counts[k]++
			rec, reason := expect.ParseLine(line)
			if (k == wellFormed) != (reason == expect.OK) {
				t.Fatalf("seed %d line %d: generated as %v, verifier says %v: %q", tc.seed, i, k, reason, trunc(line))
			}
			if want, ok := kindReason[k]; ok && reason != want {
				t.Fatalf("line %d: kind %v classified as %v, want %v: %q", i, k, reason, want, trunc(line))
			}
			if k == wellFormed && !strings.HasPrefix(rec.Path, "/") {
				t.Fatalf("line %d: path %q", i, rec.Path)
			}
		}
		bad := cfg.lines - counts[wellFormed]
		want := int(math.Round(float64(tc.lines) * tc.malformed))
		if bad != want {
			t.Errorf("%d lines at %v: %d malformed, want %d", tc.lines, tc.malformed, bad, want)
		}
		if bad >= int(numKinds)-1 {
			for k := lineKind(1); k < numKinds; k++ {
				if counts[k] == 0 {
					t.Errorf("%d lines at %v: no %v line", tc.lines, tc.malformed, k)
				}
			}
		}
	}
}

// kindReason is the verifier's reason for kinds that map to exactly one.
var kindReason = map[lineKind]expect.Reason{
	mBadStatus:   expect.Status,
	mBadBytes:    expect.Bytes,
	mEmpty:       expect.Empty,
	mInvalidUTF8: expect.InvalidUTF8,
	mTooLong:     expect.TooLong,
	mTruncated:   expect.Fields,
	mBadFields:   expect.Fields,
}

func trunc(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

func TestMalformedShareWithinTolerance(t *testing.T) {
	for _, frac := range []float64{0.02, 0.1, 0.5} {
		data, _ := gen(t, testConfig(20000, frac, 11))
		res, stats, err := expect.Compute(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if stats.Lines != 20000 {
			t.Fatalf("%d lines", stats.Lines)
		}
		share := float64(res.Malformed) / float64(stats.Lines)
		if math.Abs(share-frac) > 0.001 {
			t.Errorf("malformed share %.4f, want %.4f", share, frac)
		}
		// Every reason shows up too (the verifier's view of variety).
		if frac >= 0.1 {
			for r := 1; r < expect.NumReasons; r++ {
				if stats.ByReason[r] == 0 {
					t.Errorf("no line malformed for reason %v", expect.Reason(r))
				}
			}
		}
	}
}

func TestShape(t *testing.T) {
	cfg := testConfig(60000, 0.02, 5)
	data, _ := gen(t, cfg)
	res, _, err := expect.Compute(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.PageViews); n > cfg.paths || n < cfg.paths*8/10 {
		t.Errorf("%d distinct paths, want about %d", n, cfg.paths)
	}
	if n := len(res.Visitors); n > cfg.ips || n < cfg.ips*8/10 {
		t.Errorf("%d distinct visitors, want about %d", n, cfg.ips)
	}
	var v6 int
	for ip := range res.Visitors {
		if strings.Contains(ip, ":") {
			v6++
		}
	}
	if v6 == 0 || v6 > len(res.Visitors)/4 {
		t.Errorf("%d IPv6 visitors of %d", v6, len(res.Visitors))
	}
	// Skew: the most popular path has many more views than the median.
	var max int64
	for _, n := range res.PageViews {
		max = max2(max, n)
	}
	if total := int64(60000 * 98 / 100); max < total/20 {
		t.Errorf("most popular path has only %d of %d views", max, total)
	}
	for _, s := range []string{"200", "304", "404", "500", "301"} {
		if res.StatusCounts[s] == 0 {
			t.Errorf("no status %s", s)
		}
	}
	if float64(res.StatusCounts["200"]) < 0.7*float64(60000*0.98) {
		t.Errorf("status 200 is not dominant: %v", res.StatusCounts)
	}
	// Several hours (UTC; the log is written at +0530).
	if n := len(res.BytesPerHour); n < 6 || n > 8 {
		t.Errorf("%d hours: %v", n, res.BytesPerHour)
	}
	for _, trap := range []string{"\r\n", " - - [", "?", "//", `HTTP://`, "%C3%A9", "/Docs/", `" 200 - "`, " +0530]", `-" "-"`} {
		if !bytes.Contains(data, []byte(trap)) {
			t.Errorf("output never contains %q", trap)
		}
	}
}

func max2(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// TestTimeOrder: well-formed lines' UTC hours never go back, but seconds
// sometimes do.
func TestTimeOrder(t *testing.T) {
	g := newGenerator(testConfig(50000, 0.02, 8))
	var lastHour, lastSec int64 = math.MinInt64, math.MinInt64
	backwards := 0
	for i := 0; i < 50000; i++ {
		line, k := g.next()
		if k != wellFormed {
			continue
		}
		rec, _ := expect.ParseLine(line)
		if rec.Hour < lastHour {
			t.Fatalf("line %d: hour %s after %s", i, rec.HourKey(), expect.HourKey(lastHour))
		}
		lastHour = rec.Hour
		i1 := bytes.IndexByte(line, '[')
		ts, err := time.Parse(tsLayout, string(line[i1+1:i1+27]))
		if err != nil {
			t.Fatal(err)
		}
		if ts.Unix() < lastSec {
			backwards++
			if lastSec-ts.Unix() > 16 {
				t.Fatalf("line %d goes back %d s", i, lastSec-ts.Unix())
			}
		}
		lastSec = max2(lastSec, ts.Unix())
	}
	if backwards == 0 {
		t.Error("timestamps never go backwards")
	}
}

func TestPadding(t *testing.T) {
	g := newGenerator(testConfig(150, 0, 3))
	for i := 0; i < 150; i++ {
		line, _ := g.next()
		line = bytes.TrimSuffix(line, []byte("\r"))
		rec, _ := expect.ParseLine(line)
		padded := g.pad(append([]byte(nil), line...), maxLine, true)
		if len(padded) != maxLine {
			t.Fatalf("padded to %d bytes", len(padded))
		}
		rec2, reason := expect.ParseLine(padded)
		if reason != expect.OK || rec2 != rec {
			t.Fatalf("padding changed the line's meaning: %v %+v vs %+v\n%q", reason, rec2, rec, trunc(padded))
		}
		if _, reason := expect.ParseLine(g.pad(append([]byte(nil), line...), maxLine+1, true)); reason != expect.TooLong {
			t.Fatalf("maxLine+1: %v", reason)
		}
	}
}

// TestHugeLines: -huge makes that many of the malformed lines longer than
// the reader's limit; they are too long by the rules, and nothing else moves.
func TestHugeLines(t *testing.T) {
	cfg := testConfig(200, 0.05, 8)
	cfg.huge = 3
	data, counts := gen(t, cfg)
	huge := 0
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(l) > hugeLine {
			huge++
		}
	}
	res, stats, err := expect.Compute(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if huge != 3 || stats.Lines != 200 || res.Malformed != 10 || stats.ByReason[expect.TooLong] < 3 || counts[mTooLong] < 3 {
		t.Errorf("%d lines over 1 MiB, want 3; %d lines, %d malformed (want 10), %d too long", huge, stats.Lines, res.Malformed, stats.ByReason[expect.TooLong])
	}
	var b bytes.Buffer
	if code := run([]string{"-lines", "10", "-malformed", "0.1", "-huge", "2"}, &b, &b); code != 2 {
		t.Errorf("-huge over the malformed lines: exit %d, want 2", code)
	}
}

func TestFinalNewline(t *testing.T) {
	cfg := testConfig(500, 1, 12) // all malformed, so empty lines are likely
	for _, final := range []bool{true, false} {
		for seed := uint64(0); seed < 20; seed++ {
			cfg.seed = seed
			var b bytes.Buffer
			if _, err := generate(&b, cfg, final); err != nil {
				t.Fatal(err)
			}
			if got := bytes.HasSuffix(b.Bytes(), []byte("\n")); got != final {
				t.Fatalf("final=%v: output ends in newline: %v", final, got)
			}
			_, stats, err := expect.Compute(&b)
			if err != nil {
				t.Fatal(err)
			}
			if stats.Lines != int64(cfg.lines) || stats.WellFormed != 0 {
				t.Fatalf("final=%v seed %d: %+v", final, seed, stats)
			}
		}
	}
}

func TestFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-lines", "10", "-malformed", "0", "-start", "2026-01-02T03:04:05-07:00"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != 10 {
		t.Errorf("%d lines", n)
	}
	if !bytes.Contains(out.Bytes(), []byte("[02/Jan/2026:03:04:05 -0700]")) {
		t.Errorf("first timestamp not in the -start zone: %s", out.String()[:120])
	}
	for _, args := range [][]string{
		{"-lines", "-1"}, {"-malformed", "1.5"}, {"-start", "yesterday"}, {"-ips", "0"}, {"-paths", "0"},
		{"-nope"}, {"extra"}, {"-out", filepath.Join(t.TempDir(), "no", "such", "dir")},
	} {
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func BenchmarkGenerate(b *testing.B) {
	cfg := testConfig(b.N, 0.02, 1)
	b.SetBytes(190)
	if _, err := generate(discard{}, cfg, true); err != nil {
		b.Fatal(err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
