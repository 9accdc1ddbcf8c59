package expect

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// handLines is a small hand-written log. W = well-formed, M = malformed.
// The expected results in TestHandWrittenLog were computed by hand from the
// README rules, not by running the code.
var handLines = []string{
	// W1: query stripped.
	`203.0.113.7 - frank [21/Nov/2026:13:55:36 +0000] "GET /docs/index.html?x=1 HTTP/1.1" 200 2326 "http://example.com/start" "Mozilla/5.0 (X11)"`,
	// W2: repeated slash and trailing slash; bytes "-" is 0.
	`203.0.113.7 - - [21/Nov/2026:13:59:59 +0000] "GET /docs//index.html/ HTTP/1.1" 304 - "-" "curl/8.0"`,
	// W3: absolute URL with upper-case host and port, query and fragment; empty referer and agent.
	`198.51.100.2 - - [21/Nov/2026:14:00:00 +0000] "POST http://Example.COM:8080/api//v1/?q=a#frag HTTP/1.0" 201 0 "" ""`,
	// W4: +0100 -> 14:30 UTC.
	`2001:db8::1 - - [21/Nov/2026:15:30:00 +0100] "GET / HTTP/2.0" 200 100 "-" "-"`,
	// W5: host is verbatim (a different visitor from W4); path case is kept; HTTP/2; -0500 -> 14:15 UTC.
	`2001:DB8::1 - - [21/Nov/2026:09:15:00 -0500] "HEAD /Docs/Index.html HTTP/2" 200 - "-" "-"`,
	// W6: absolute URL without a path is "/"; +0100 crosses midnight backwards -> 2026-11-21T23.
	`198.51.100.2 - - [22/Nov/2026:00:30:00 +0100] "GET https://example.com HTTP/1.1" 404 512 "-" "-"`,
	// W7: percent-encoding kept as is; leading zeros in bytes; escaped quotes in the agent.
	`198.51.100.2 - - [21/Nov/2026:13:00:00 +0000] "GET /search/caf%C3%A9?x HTTP/1.1" 500 007 "-" "a \"quoted\" agent"`,
	// W8: dot segments are not resolved; CRLF.
	"10.0.0.1 - - [21/Nov/2026:13:10:00 +0000] \"GET /a/./b/../c HTTP/1.1\" 200 1 \"-\" \"-\"\r",
	// W9: only slashes -> "/"; status 599 and 12-digit bytes are the maxima; ident and user ignored.
	`10.0.0.1 ident user [21/Nov/2026:13:20:00 +0000] "DELETE ///// HTTP/1.1" 599 999999999999 "-" "-"`,
	// W10: leap day; status 100 is the minimum; query then fragment.
	`10.0.0.1 - - [29/Feb/2028:00:00:00 +0000] "GET /x?y#z HTTP/1.1" 100 12 "-" "-"`,
	// W11: upper-case scheme; +2359 -> 2026-12-31T01 UTC.
	`10.0.0.1 - - [01/Jan/2027:00:59:59 +2359] "GET HTTP://h HTTP/1.1" 200 5 "-" "-"`,
	// W12: "-0000" is UTC; trailing slash removed, %7E not decoded.
	`10.0.0.1 - - [21/Nov/2026:13:00:00 -0000] "GET /%7Euser/ HTTP/1.1" 200 3 "-" "-"`,
	// W13: "[bob]" is just the user field; fragment cut; "]" inside the agent is fine.
	`192.0.2.9 - [bob] [21/Nov/2026:13:30:00 +0000] "GET /a#b/c HTTP/1.1" 200 10 "-" "x]y"`,
	// W14: the authority ends at "?".
	`192.0.2.9 - - [21/Nov/2026:13:30:00 +0000] "GET http://h?x=/y HTTP/1.1" 200 1 "-" "-"`,
	// W15: non-ASCII (valid UTF-8) path.
	`192.0.2.9 - - [21/Nov/2026:13:30:00 +0000] "GET /日本/ HTTP/1.1" 200 1 "-" "-"`,
	// W16: a target starting with "//" is a path, not an authority.
	`192.0.2.9 - - [21/Nov/2026:13:30:00 +0000] "GET //a HTTP/1.1" 200 1 "-" "-"`,
	// W17: exactly MaxLineLen bytes (built in longLine).
	"LONG-OK",

	// M1..M3: empty, CR only, spaces only.
	"",
	"\r",
	"   ",
	// M4: truncated.
	`203.0.113.7 - frank [21/Nov/2026:13:55:36 +0000] "GET /docs/index.html HTTP/1.1" 200 2326 "http://example.com/start" "Mozilla`,
	// M5: missing closing quote of the request.
	`203.0.113.7 - - [21/Nov/2026:13:55:36 +0000] "GET / HTTP/1.1 200 1 "-" "-"`,
	// M6..M9: bad status.
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m6 HTTP/1.1" 2x0 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m7 HTTP/1.1" 99 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m8 HTTP/1.1" 600 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m9 HTTP/1.1" 099 1 "-" "-"`,
	// M10..M16, M34: bad timestamps (several are accepted by Go's time.Parse).
	`10.9.9.9 - - [21/nov/2026:13:00:00 +0000] "GET /m10 HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:3:00:00 +0000] "GET /m11 HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [31/Nov/2026:13:00:00 +0000] "GET /m12 HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [29/Feb/2026:13:00:00 +0000] "GET /m13 HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00.123 +0000] "GET /m14 HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +2400] "GET /m15 HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/0999:13:00:00 +0000] "GET /m16 HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/9999:13:00:00 +0000] "GET /m34 HTTP/1.1" 200 1 "-" "-"`,
	// M17..M19: bad bytes.
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m17 HTTP/1.1" 200 12a "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m18 HTTP/1.1" 200 -5 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m19 HTTP/1.1" 200 1234567890123 "-" "-"`,
	// M20..M24, M33: bad request lines.
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "-" 408 - "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m21" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "get /m22 HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "OPTIONS * HTTP/1.1" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m24 HTTP/1.1x" 200 1 "-" "-"`,
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET ftp://x/m33 HTTP/1.1" 200 1 "-" "-"`,
	// M26: invalid UTF-8 (Latin-1 é).
	"10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] \"GET /caf\xe9 HTTP/1.1\" 200 1 \"-\" \"-\"",
	// M27: trailing space.
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m27 HTTP/1.1" 200 1 "-" "-" `,
	// M28: Common Log Format (no referer, no agent).
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m28 HTTP/1.1" 200 1`,
	// M29: two CRs: only one is stripped.
	"10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] \"GET /m29 HTTP/1.1\" 200 1 \"-\" \"-\"\r\r",
	// M30: the last quote is escaped, so the agent is unterminated.
	`10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] "GET /m30 HTTP/1.1" 200 1 "-" "abc\"`,
	// M31: MaxLineLen+1 bytes.
	"LONG-BAD",
	// M32: tab instead of a space.
	"10.9.9.9 - - [21/Nov/2026:13:00:00 +0000] \"GET /m32 HTTP/1.1\" 200 1 \"-\"\t\"-\"",
	// M35: far longer than any buffer.
	"HUGE",
	// W15 again, without "\n" at the end of the file: the last line counts.
	`192.0.2.9 - - [21/Nov/2026:13:30:00 +0000] "GET /日本/ HTTP/1.1" 200 1 "-" "-"`,
}

const handMalformed = 34

// longLine returns a well-formed-looking line of exactly n bytes.
func longLine(path string, n int) string {
	pre := `192.0.2.10 - - [21/Nov/2026:13:00:00 +0000] "GET ` + path + `?pad=`
	suf := ` HTTP/1.1" 200 1 "-" "-"`
	return pre + strings.Repeat("a", n-len(pre)-len(suf)) + suf
}

func handLog() []byte {
	var b bytes.Buffer
	for i, l := range handLines {
		switch l {
		case "LONG-OK":
			l = longLine("/long", MaxLineLen)
		case "LONG-BAD":
			l = longLine("/toolong", MaxLineLen+1)
		case "HUGE":
			l = longLine("/huge", 5*MaxLineLen)
		}
		b.WriteString(l)
		if i < len(handLines)-1 {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func TestHandWrittenLog(t *testing.T) {
	want := &Results{
		PageViews: map[string]int64{
			"/docs/index.html":  2,
			"/api/v1":           1,
			"/":                 5,
			"/Docs/Index.html":  1,
			"/search/caf%C3%A9": 1,
			"/a/./b/../c":       1,
			"/x":                1,
			"/%7Euser":          1,
			"/a":                2,
			"/日本":               2,
			"/long":             1,
		},
		Visitors: map[string]int64{
			"203.0.113.7":  2,
			"198.51.100.2": 3,
			"2001:db8::1":  1,
			"2001:DB8::1":  1,
			"10.0.0.1":     5,
			"192.0.2.9":    5,
			"192.0.2.10":   1,
		},
		StatusCounts: map[string]int64{"200": 12, "304": 1, "201": 1, "404": 1, "500": 1, "599": 1, "100": 1},
		BytesPerHour: map[string]int64{
			"2026-11-21T13": 1000000002351, // 2326+0+7+1+999999999999+3+10+1+1+1+1+1
			"2026-11-21T14": 100,
			"2026-11-21T23": 512,
			"2028-02-29T00": 12,
			"2026-12-31T01": 5,
		},
		LinesPerHour: map[string]int64{
			"2026-11-21T13": 12,
			"2026-11-21T14": 3, // 100 bytes and two lines of 0
			"2026-11-21T23": 1,
			"2028-02-29T00": 1,
			"2026-12-31T01": 1,
		},
		Malformed: handMalformed,
	}
	got, stats, err := Compute(bytes.NewReader(handLog()))
	if err != nil {
		t.Fatal(err)
	}
	if d := Compare(want, got); len(d) > 0 {
		var b strings.Builder
		Report(&b, want, got, d, 0)
		t.Fatalf("hand-written log:\n%s", b.String())
	}
	if stats.Lines != int64(len(handLines)) || stats.WellFormed != 18 || stats.Lines-stats.WellFormed != handMalformed {
		t.Errorf("stats = %+v, want %d lines, 18 well-formed", stats, len(handLines))
	}
	wantReasons := map[Reason]int64{Empty: 2, TooLong: 2, InvalidUTF8: 1, Fields: 8, Timestamp: 8, Request: 6, Status: 4, Bytes: 3}
	for r := Empty; r < numReasons; r++ {
		if stats.ByReason[r] != wantReasons[r] {
			t.Errorf("reason %v: %d lines, want %d", r, stats.ByReason[r], wantReasons[r])
		}
	}
}

func TestLineSplitting(t *testing.T) {
	ok := `1.2.3.4 - - [21/Nov/2026:13:00:00 +0000] "GET / HTTP/1.1" 200 1 "-" "-"`
	cases := []struct {
		name      string
		log       string
		lines     int64
		malformed int64
	}{
		{"empty file", "", 0, 0},
		{"one newline", "\n", 1, 1},
		{"crlf only", "\r\n", 1, 1},
		{"final line without newline", ok + "\n" + ok, 2, 0},
		{"final line with newline", ok + "\n" + ok + "\n", 2, 0},
		{"final empty line then eof", ok + "\n\n", 2, 1},
		{"crlf lines", ok + "\r\n" + ok + "\r\n", 2, 0},
		{"cr not at end is a byte", ok + "\r" + ok + "\n", 1, 1},
		{"long line without newline at eof", longLine("/x", 10*MaxLineLen), 1, 1},
		{"long line then a line", longLine("/x", 10*MaxLineLen) + "\n" + ok, 2, 1},
		{"limit line with crlf", longLine("/x", MaxLineLen) + "\r\n", 1, 0},
		{"limit+1 line with crlf", longLine("/x", MaxLineLen+1) + "\r\n", 1, 1},
	}
	for _, c := range cases {
		res, stats, err := Compute(strings.NewReader(c.log))
		if err != nil {
			t.Fatal(err)
		}
		if stats.Lines != c.lines || res.Malformed != c.malformed {
			t.Errorf("%s: %d lines, %d malformed; want %d, %d", c.name, stats.Lines, res.Malformed, c.lines, c.malformed)
		}
	}
}

func TestParseLineRecord(t *testing.T) {
	rec, r := ParseLine([]byte(`2001:db8::1 - - [21/Nov/2026:15:30:00 +0100] "GET //x//y/?a HTTP/2.0" 503 42 "-" "-"` + "\r"))
	want := Record{Host: "2001:db8::1", Path: "/x/y", Status: 503, Bytes: 42}
	if r != OK {
		t.Fatalf("reason %v", r)
	}
	if rec.HourKey() != "2026-11-21T14" {
		t.Errorf("hour %s", rec.HourKey())
	}
	rec.Hour = 0
	if !reflect.DeepEqual(rec, want) {
		t.Errorf("got %+v, want %+v", rec, want)
	}
}

func TestNormalizeTarget(t *testing.T) {
	cases := []struct{ in, want string }{
		{"/", "/"},
		{"/a", "/a"},
		{"/a/", "/a"},
		{"//", "/"},
		{"///a///b///", "/a/b"},
		{"/a?b", "/a"},
		{"/a#b", "/a"},
		{"/a#b?c", "/a"},
		{"/?", "/"},
		{"/#", "/"},
		{"/A/B", "/A/B"},
		{"/%41", "/%41"},
		{"/a%2Fb", "/a%2Fb"},
		{"/a/../b/./c", "/a/../b/./c"},
		{"/a;p=1", "/a;p=1"},
		{"http://h", "/"},
		{"http://h/", "/"},
		{"http://h/a/", "/a"},
		{"HtTpS://h:1/a", "/a"},
		{"http://h?x=/y", "/"},
		{"http://h#/y", "/"},
		{"http://", "/"},
		{"http:///a", "/a"},
		{"http://u@h//a", "/a"},
		{"https://h/a?b#c", "/a"},
	}
	for _, c := range cases {
		got, ok := NormalizeTarget([]byte(c.in))
		if !ok || got != c.want {
			t.Errorf("NormalizeTarget(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	for _, in := range []string{"", "*", "a/b", "?x", "#x", "ftp://h/a", "http:/h/a", "https:h", "example.com:443", "httpſ://h/a", "http:\\\\h"} {
		if got, ok := NormalizeTarget([]byte(in)); ok {
			t.Errorf("NormalizeTarget(%q) = %q, ok; want malformed", in, got)
		}
	}
}

func TestTimestamp(t *testing.T) {
	good := map[string]string{
		"21/Nov/2026:13:55:36 +0000": "2026-11-21T13",
		"21/Nov/2026:13:55:36 -0000": "2026-11-21T13",
		"21/Nov/2026:00:00:00 +0001": "2026-11-20T23",
		"21/Nov/2026:23:59:59 -0001": "2026-11-22T00",
		"01/Jan/2027:05:00:00 +0530": "2026-12-31T23",
		"29/Feb/2000:12:00:00 +0000": "2000-02-29T12",
		"31/Dec/9998:23:59:59 -2359": "9999-01-01T23",
		"01/Jan/1000:00:00:00 +2359": "0999-12-31T00",
		"30/Apr/2026:23:59:59 +2300": "2026-04-30T00",
		"31/Jan/2026:00:00:00 +0000": "2026-01-31T00",
		"01/Jan/1970:00:59:59 +0100": "1969-12-31T23",
	}
	for in, want := range good {
		h, ok := parseTimestamp([]byte(in))
		if !ok || HourKey(h) != want {
			t.Errorf("%q: %s, %v; want %s", in, HourKey(h), ok, want)
		}
	}
	for _, in := range []string{
		"", "-", "21/Nov/2026:13:55:36", "21/Nov/2026:13:55:36 +000", "21/Nov/2026:13:55:36 +00000",
		"21/nov/2026:13:55:36 +0000", "21/NOV/2026:13:55:36 +0000", "21/Foo/2026:13:55:36 +0000",
		"00/Nov/2026:13:55:36 +0000", "32/Nov/2026:13:55:36 +0000", "31/Nov/2026:13:55:36 +0000",
		"29/Feb/2026:13:55:36 +0000", "29/Feb/1900:13:55:36 +0000", "30/Feb/2000:13:55:36 +0000",
		"21/Nov/2026:24:00:00 +0000", "21/Nov/2026:13:60:00 +0000", "21/Nov/2026:13:55:60 +0000",
		"21/Nov/2026:13:55:36 +2400", "21/Nov/2026:13:55:36 +0060", "21/Nov/2026:13:55:36 ~0000",
		"21/Nov/2026:13:55:36 0000 ", "21/Nov/2026:13:55:36  0000", "21/Nov/2026 13:55:36 +0000",
		"21/Nov/0999:13:55:36 +0000", "21/Nov/9999:13:55:36 +0000", "1/Nov/2026:13:55:36 +0000 ",
		"21/Nov/2026:3:55:36 +0000", "21/Nov/2026:13:55:36.1 +0000", "2026-11-21T13:55:36Z      ",
		"21/Nov/2026:13:55:36 +00:0", "21/Nov/2026:1a:55:36 +0000", "21-Nov-2026:13:55:36 +0000",
		"２1/Nov/2026:13:55:36 +0000", "21/Nov/2026:13:55:36 UTC00",
	} {
		if h, ok := parseTimestamp([]byte(in)); ok {
			t.Errorf("%q accepted as %s", in, HourKey(h))
		}
		line := `1.2.3.4 - - [` + in + `] "GET / HTTP/1.1" 200 1 "-" "-"`
		if _, r := ParseLine([]byte(line)); r == OK {
			t.Errorf("line with %q accepted", in)
		}
		checkAgainstRef(t, []byte(line))
	}
}

func TestStatusAndBytes(t *testing.T) {
	line := func(status, bytes string) []byte {
		return []byte(`1.2.3.4 - - [21/Nov/2026:13:00:00 +0000] "GET / HTTP/1.1" ` + status + ` ` + bytes + ` "-" "-"`)
	}
	for _, s := range []string{"100", "200", "599", "404"} {
		if rec, r := ParseLine(line(s, "1")); r != OK || strconv.Itoa(rec.Status) != s {
			t.Errorf("status %q: %v %v", s, rec, r)
		}
	}
	for _, s := range []string{"99", "099", "600", "999", "2x0", "20", "2000", "-", "+20", "２００", "1e2", "0"} {
		if _, r := ParseLine(line(s, "1")); r == OK {
			t.Errorf("status %q accepted", s)
		}
		checkAgainstRef(t, line(s, "1"))
	}
	for in, want := range map[string]int64{"-": 0, "0": 0, "000": 0, "007": 7, "999999999999": 999999999999, "000000000001": 1} {
		if rec, r := ParseLine(line("200", in)); r != OK || rec.Bytes != want {
			t.Errorf("bytes %q: %v %v", in, rec, r)
		}
	}
	for _, in := range []string{"--", "-0", "-5", "+5", "1.5", "12a", "0x1f", "1,024", "1e3", "1234567890123", "0000000000000", "١٢٣", "NaN"} {
		if _, r := ParseLine(line("200", in)); r == OK {
			t.Errorf("bytes %q accepted", in)
		}
		checkAgainstRef(t, line("200", in))
	}
}

func TestRequestLine(t *testing.T) {
	line := func(req string) []byte {
		return []byte(`1.2.3.4 - - [21/Nov/2026:13:00:00 +0000] "` + req + `" 200 1 "-" "-"`)
	}
	for req, path := range map[string]string{
		"GET / HTTP/1.1": "/", "POST /a HTTP/1.0": "/a", "X /a HTTP/2": "/a", "PROPFIND /a/ HTTP/3.0": "/a",
		`GET /a\"b HTTP/1.1`: `/a\"b`, "GET /a\\ HTTP/1.1": "/a\\", "GET /a\\\\ HTTP/1.1": "/a\\\\",
	} {
		if rec, r := ParseLine(line(req)); r != OK || rec.Path != path {
			t.Errorf("request %q: %+v %v, want path %q", req, rec, r, path)
		}
		checkAgainstRef(t, line(req))
	}
	for _, req := range []string{
		"-", "", "GET", "GET /", "GET  / HTTP/1.1", "GET / HTTP/1.1 ", " GET / HTTP/1.1", "GET /a b HTTP/1.1",
		"get / HTTP/1.1", "G3T / HTTP/1.1", "GÉT / HTTP/1.1", "GET / http/1.1", "GET / HTTP/1.1x", "GET / HTTP/11",
		"GET / HTTP/1.", "GET / HTTP/", "GET / HTTPS/1.1", "GET / HTTP/1.1.1", "GET\t/\tHTTP/1.1", "OPTIONS * HTTP/1.1",
		"CONNECT h:443 HTTP/1.1", "GET a HTTP/1.1", "GET ?a HTTP/1.1", "GET ftp://h/ HTTP/1.1", `\x16\x03\x01`,
	} {
		if _, r := ParseLine(line(req)); r == OK {
			t.Errorf("request %q accepted", req)
		}
		checkAgainstRef(t, line(req))
	}
}
