package flowlets

import (
	"strings"
	"testing"
)

// line builds a combined-format line from its varying fields.
func line(host, ts, req, status, nbytes string) string {
	return host + ` - - [` + ts + `] "` + req + `" ` + status + ` ` + nbytes + ` "http://example.com/" "Mozilla/5.0 (X11)"`
}

const (
	okTime = "21/Nov/2026:13:45:01 +0000"
	okReq  = "GET /docs/index.html HTTP/1.1"
)

func okLine() string { return line("203.0.113.7", okTime, okReq, "200", "1234") }

type want struct {
	host, path, status, hour string
	bytes                    int64
}

func parse(t *testing.T, s string) (Line, Reason, bool) {
	t.Helper()
	var p LineParser
	return p.Parse([]byte(s))
}

func checkOK(t *testing.T, name, s string, w want) {
	t.Helper()
	l, r, ok := parse(t, s)
	if !ok {
		t.Errorf("%s: %q: malformed (%v), want well-formed", name, trunc(s), r)
		return
	}
	got := want{string(l.Host), string(l.Path), string(l.Status[:]), string(l.Hour[:]), l.Bytes}
	if w.host == "" {
		w.host = got.host
	}
	if w.path == "" {
		w.path = got.path
	}
	if w.status == "" {
		w.status = got.status
	}
	if w.hour == "" {
		w.hour = got.hour
	}
	if w.bytes < 0 {
		w.bytes = got.bytes
	}
	if got != w {
		t.Errorf("%s: %q:\n got %+v\nwant %+v", name, trunc(s), got, w)
	}
}

func checkBad(t *testing.T, name, s string, reason Reason) {
	t.Helper()
	_, r, ok := parse(t, s)
	if ok {
		t.Errorf("%s: %q: well-formed, want malformed (%v)", name, trunc(s), reason)
		return
	}
	if r != reason {
		t.Errorf("%s: %q: reason %v, want %v", name, trunc(s), r, reason)
	}
}

func trunc(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

func TestParseWellFormed(t *testing.T) {
	checkOK(t, "basic", okLine(), want{"203.0.113.7", "/docs/index.html", "200", "2026-11-21T13", 1234})
	checkOK(t, "crlf", okLine()+"\r", want{"203.0.113.7", "/docs/index.html", "200", "2026-11-21T13", 1234})
	checkOK(t, "ipv6 verbatim", line("2001:DB8::1", okTime, okReq, "404", "-"), want{host: "2001:DB8::1", status: "404", bytes: 0})
	checkOK(t, "host name", line("crawler.example.org", okTime, okReq, "200", "1"), want{host: "crawler.example.org", bytes: 1})
	checkOK(t, "odd token bytes", `a"[b\ x] y"z [21/Nov/2026:13:45:01 +0000] "GET / HTTP/1.1" 200 5 "" ""`,
		want{host: `a"[b\`, path: "/", bytes: 5})
	checkOK(t, "tab and NUL inside a token", "h\tx\x00 - - ["+okTime+`] "GET / HTTP/1.1" 200 5 "" ""`, want{host: "h\tx\x00", bytes: 5})
	checkOK(t, "empty referer and agent", `h - - [`+okTime+`] "GET /a HTTP/1.0" 200 5 "" ""`, want{path: "/a", bytes: 5})
	checkOK(t, "escaped quotes in agent", `h - - [`+okTime+`] "GET /a HTTP/1.0" 200 5 "r" "say \"hi\" \\"`, want{path: "/a", bytes: 5})
	checkOK(t, "escaped quote in request kept verbatim", line("h", okTime, `GET /a\"b HTTP/1.1`, "200", "1"), want{path: `/a\"b`, bytes: 1})
	checkOK(t, "non-ASCII UTF-8", line("h", okTime, "GET /café/ü HTTP/2", "200", "1"), want{path: "/café/ü", bytes: 1})
	checkOK(t, "UTF-8 agent", `h - - [`+okTime+`] "GET / HTTP/2.0" 200 5 "-" "日本語"`, want{path: "/", bytes: 5})
	checkOK(t, "bracket in user", `h - us]er [`+okTime+`] "GET / HTTP/2.0" 200 5 "-" "a"`, want{bytes: 5})

	// Methods and protocols.
	for _, req := range []string{"PROPFIND / HTTP/1.1", "X / HTTP/1.1", "GET / HTTP/2", "GET / HTTP/3", "GET / HTTP/2.0", "GET / HTTP/1.0", "GET / HTTP/9.9", "GET / HTTP/1"} {
		checkOK(t, "request", line("h", okTime, req, "200", "1"), want{path: "/", bytes: 1})
	}
	// Status range.
	for _, s := range []string{"100", "199", "200", "404", "599"} {
		checkOK(t, "status", line("h", okTime, okReq, s, "1"), want{status: s, bytes: 1})
	}
	// Bytes.
	for s, n := range map[string]int64{"-": 0, "0": 0, "000": 0, "007": 7, "999999999999": 999999999999, "000000000001": 1} {
		checkOK(t, "bytes "+s, line("h", okTime, okReq, "200", s), want{bytes: n})
	}
}

func TestParsePaths(t *testing.T) {
	cases := map[string]string{
		"/docs//index.html/?x=1":                 "/docs/index.html",
		"http://Example.COM:8080/api//v1/?q=a#f": "/api/v1",
		"https://example.com":                    "/",
		"http://h?x=/y":                          "/",
		"http://h#x/y":                           "/",
		"//a":                                    "/a",
		"/////":                                  "/",
		"/a#b?c":                                 "/a",
		"/a?b#c":                                 "/a",
		"/%7Euser/":                              "/%7Euser",
		"/caf%C3%A9":                             "/caf%C3%A9",
		"/a%2Fb":                                 "/a%2Fb",
		"/100%25":                                "/100%25",
		"/%41":                                   "/%41",
		"/%7e":                                   "/%7e",
		"/Docs/Guide":                            "/Docs/Guide",
		"/a/../b":                                "/a/../b",
		"/a/./b/":                                "/a/./b",
		"/a;p=1+x":                               "/a;p=1+x",
		`/a\b`:                                   `/a\b`,
		"/":                                      "/",
		"/?":                                     "/",
		"/#":                                     "/",
		"/a/":                                    "/a",
		"/a//":                                   "/a",
		"/a//b//c//":                             "/a/b/c",
		"HTTP://x.y/P":                           "/P",
		"Https://u:p@x.y:1/q/":                   "/q",
		"hTtPs://x//a":                           "/a",
		"http://":                                "/",
		"http:///a":                              "/a",
		"http://x/":                              "/",
		"http://x?":                              "/",
		"https://x//":                            "/",
		"http://x/a?b/c":                         "/a",
	}
	for target, path := range cases {
		checkOK(t, "path", line("h", okTime, "GET "+target+" HTTP/1.1", "200", "1"), want{path: path, bytes: 1})
	}
}

func TestParseTimes(t *testing.T) {
	cases := map[string]string{
		"21/Nov/2026:13:45:01 +0000": "2026-11-21T13",
		"21/Nov/2026:13:45:01 -0000": "2026-11-21T13",
		"21/Nov/2026:13:45:01 +0530": "2026-11-21T08",
		"21/Nov/2026:13:25:01 +0530": "2026-11-21T07",
		"21/Nov/2026:13:45:01 -0500": "2026-11-21T18",
		"21/Nov/2026:20:00:00 -0400": "2026-11-22T00",
		"31/Dec/2026:23:59:59 -2359": "2027-01-01T23",
		"01/Jan/1000:00:00:00 +2359": "0999-12-31T00",
		"31/Dec/9998:23:59:59 -2359": "9999-01-01T23",
		"29/Feb/2024:12:00:00 +0000": "2024-02-29T12",
		"29/Feb/2000:12:00:00 +0000": "2000-02-29T12",
		"01/Mar/2024:00:30:00 +0100": "2024-02-29T23",
		"01/Mar/2025:00:30:00 +0100": "2025-02-28T23",
		"01/Mar/1900:00:30:00 +0100": "1900-02-28T23",
		"31/Jan/2026:00:00:00 +0000": "2026-01-31T00",
		"30/Apr/2026:00:00:00 +0000": "2026-04-30T00",
		"31/Jul/2026:23:00:00 -0100": "2026-08-01T00",
		"15/Jun/2026:00:00:59 +0000": "2026-06-15T00",
	}
	for ts, hour := range cases {
		checkOK(t, "time "+ts, line("h", ts, okReq, "200", "1"), want{hour: hour, bytes: 1})
	}
	for _, m := range monthNames {
		checkOK(t, "month "+m, line("h", "01/"+m+"/2026:00:00:00 +0000", okReq, "200", "1"), want{bytes: 1})
	}
}

func TestParseCachedTimes(t *testing.T) {
	// The hour cache must not carry a key over to a timestamp that
	// differs in the minutes (which matter with a non-whole-hour offset),
	// nor accept bad seconds after a good line.
	var p LineParser
	seq := []struct{ ts, hour string }{
		{"21/Nov/2026:13:29:01 +0530", "2026-11-21T07"},
		{"21/Nov/2026:13:29:59 +0530", "2026-11-21T07"},
		{"21/Nov/2026:13:30:00 +0530", "2026-11-21T08"},
		{"21/Nov/2026:13:30:60 +0530", ""},
		{"21/Nov/2026:13:30:6x +0530", ""},
		{"21/Nov/2026:13:30:01 +0530", "2026-11-21T08"},
		{"21/Nov/2026:13:30:01.5+0530", ""},
		{"21/Nov/2026:13:30:01 -0530", "2026-11-21T19"},
		{"21/Nov/2026:13:30:01 -0530", "2026-11-21T19"},
		{"21/Nov/2026:13:30:01 +0000", "2026-11-21T13"},
	}
	for _, c := range seq {
		l, r, ok := p.Parse([]byte(line("h", c.ts, okReq, "200", "1")))
		switch {
		case c.hour == "" && ok:
			t.Errorf("%s: accepted", c.ts)
		case c.hour == "" && r != ReasonTime:
			t.Errorf("%s: reason %v", c.ts, r)
		case c.hour != "" && (!ok || string(l.Hour[:]) != c.hour):
			t.Errorf("%s: got %q ok=%v, want %q", c.ts, l.Hour, ok, c.hour)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	long := func(n int) string {
		base := line("h", okTime, "GET /?pad= HTTP/1.1", "200", "1")
		i := strings.Index(base, "pad=") + 4
		return base[:i] + strings.Repeat("x", n-len(base)) + base[i:]
	}
	if n := len(long(MaxLineBytes)); n != MaxLineBytes {
		t.Fatalf("long(): %d", n)
	}
	checkOK(t, "exactly 64 KiB", long(MaxLineBytes), want{path: "/", bytes: 1})
	checkOK(t, "exactly 64 KiB + CR", long(MaxLineBytes)+"\r", want{path: "/", bytes: 1})
	checkBad(t, "64 KiB + 1", long(MaxLineBytes+1), ReasonTooLong)
	checkBad(t, "190 KiB", long(190<<10), ReasonTooLong)

	checkBad(t, "empty", "", ReasonEmpty)
	checkBad(t, "only CR", "\r", ReasonEmpty)
	checkBad(t, "two CRs", okLine()+"\r\r", ReasonFields)
	checkBad(t, "CR CR alone", "\r\r", ReasonFields)

	for name, s := range map[string]string{
		"latin-1":            line("h", okTime, "GET /caf\xe9 HTTP/1.1", "200", "1"),
		"lone continuation":  "\x80" + okLine(),
		"C0":                 okLine() + "\xc0\x80",
		"C1":                 okLine() + "\xc1\xbf",
		"F5":                 okLine() + "\xf5\x80\x80\x80",
		"FF":                 "\xff",
		"truncated":          okLine() + "\xe2\x82",
		"overlong":           okLine() + "\xe0\x80\xaf",
		"surrogate":          line("h", okTime, "GET /\xed\xa0\x80 HTTP/1.1", "200", "1"),
		"above U+10FFFF":     okLine() + "\xf4\x90\x80\x80",
		"invalid and empty?": "\xed\xa0\x80",
	} {
		checkBad(t, name, s, ReasonUTF8)
	}

	for name, s := range map[string]string{
		"leading space":       " " + okLine(),
		"trailing space":      okLine() + " ",
		"extra field":         okLine() + ` "x"`,
		"double space":        strings.Replace(okLine(), " - -", "  - -", 1),
		"double space late":   strings.Replace(okLine(), `200 1234`, `200  1234`, 1),
		"tabs":                strings.ReplaceAll(okLine(), " ", "\t"),
		"tab separator":       strings.Replace(okLine(), " 200 ", "\t200 ", 1),
		"common log format":   `h - - [` + okTime + `] "GET / HTTP/1.1" 200 1234`,
		"no agent":            `h - - [` + okTime + `] "GET / HTTP/1.1" 200 1234 "r"`,
		"no agent, space":     `h - - [` + okTime + `] "GET / HTTP/1.1" 200 1234 "r" `,
		"missing ident":       `h - [` + okTime + `] "GET / HTTP/1.1" 200 1 "r" "a"`,
		"missing host":        `- - [` + okTime + `] "GET / HTTP/1.1" 200 1 "r" "a"`,
		"no brackets":         `h - - ` + okTime + ` "GET / HTTP/1.1" 200 1 "r" "a"`,
		"no closing bracket":  `h - - [` + okTime + ` "GET / HTTP/1.1" 200 1 "r" "a"`,
		"bracket no space":    `h - - [` + okTime + `]"GET / HTTP/1.1" 200 1 "r" "a"`,
		"missing quote":       `h - - [` + okTime + `] "GET / HTTP/1.1 200 1 "r" "a"`,
		"unquoted request":    `h - - [` + okTime + `] GET / HTTP/1.1 200 1 "r" "a"`,
		"extra quote":         `h - - [` + okTime + `] "GET / HTTP/1.1"" 200 1 "r" "a"`,
		"agent unterminated":  `h - - [` + okTime + `] "GET / HTTP/1.1" 200 1 "r" "a`,
		"agent escaped close": `h - - [` + okTime + `] "GET / HTTP/1.1" 200 1 "r" "a\"`,
		"referer escaped end": `h - - [` + okTime + `] "GET / HTTP/1.1" 200 1 "r\" "a"`,
		"after agent":         okLine() + `x`,
		"no space after req":  `h - - [` + okTime + `] "GET / HTTP/1.1"200 1 "r" "a"`,
		"garbage":             "hello world",
		"json":                `{"ip":"1.2.3.4","path":"/"}`,
		"whitespace only":     "   \t ",
		"host only":           "h",
		"host space":          "h ",
	} {
		checkBad(t, name, s, ReasonFields)
	}

	for _, ts := range []string{
		"21/nov/2026:13:45:01 +0000", "21/NOV/2026:13:45:01 +0000", "21/Nov/2026:3:45:01 +0000",
		"21/Nov/2026:13:45:01.123 +0000", "31/Apr/2026:13:45:01 +0000", "29/Feb/2025:13:45:01 +0000",
		"29/Feb/1900:00:00:00 +0000", "00/Jan/2026:00:00:00 +0000", "32/Jan/2026:00:00:00 +0000",
		"21/Nov/2026:24:00:00 +0000", "21/Nov/2026:13:60:00 +0000", "21/Nov/2026:13:45:60 +0000",
		"21/Nov/2026:13:45:01 +2400", "21/Nov/2026:13:45:01 +0060", "21/Nov/2026:13:45:01 +00:00",
		"21/Nov/2026:13:45:01 UTC", "2026-11-21T13:45:01Z", "21/Nov/0999:13:45:01 +0000",
		"21/Nov/9999:13:45:01 +0000", "21/Nov/2026:13:45:01 0000", "21/Nov/2026:13:45:01 *0000",
		"21/Nov/2026:13:45:01  +000", "21/Nov/2026 13:45:01 +0000", "21-Nov-2026:13:45:01 +0000",
		"21/Nov/2026:13:45:01 +000", "21/Nov/2026:13:45:01 +00000", "", "2１/Nov/2026:13:45:01 +0000",
		"21/Nov/2026:13:45:0a +0000", "21/Nov/2026:13:45:01 +0a00", "21/Nov/2026:13:45:01 -2400",
		"+1/Nov/2026:13:45:01 +0000", "21/Nov/+026:13:45:01 +0000", "21/Nov/2026:13:45:01\t+0000",
	} {
		checkBad(t, "time "+ts, line("h", ts, okReq, "200", "1"), ReasonTime)
	}

	for _, req := range []string{
		"-", "GET /", "GET / HTTP/1.1 x", "get / HTTP/1.1", "Get / HTTP/1.1", "G3T / HTTP/1.1",
		"GET  / HTTP/1.1", "GET /  HTTP/1.1", " GET / HTTP/1.1", "GET / HTTP/1.1 ", "GET /a b HTTP/1.1",
		"OPTIONS * HTTP/1.1", "CONNECT example.com:443 HTTP/1.1", "GET a/b HTTP/1.1", "GET ?x HTTP/1.1",
		"GET #x HTTP/1.1", "GET ftp://x/ HTTP/1.1", "GET http:/x HTTP/1.1", "GET https:x HTTP/1.1",
		"GET http HTTP/1.1", "GET httpſ://x/ HTTP/1.1", "GET / http/1.1", "GET / HTTP/1.",
		"GET / HTTP/1.10", "GET / HTTP/11", "GET / HTTP/x", "GET / HTTP/", "GET / HTTPS/1.1",
		"GET / HTTP/1,1", "\\x16\\x03\\x01", "GET / HTTP/١", "GÉT / HTTP/1.1", "GET\t/ HTTP/1.1",
		"", "GET", "GET /", "GET / ",
	} {
		checkBad(t, "request "+req, line("h", okTime, req, "200", "1"), ReasonRequest)
	}

	for _, s := range []string{"2x0", "99", "099", "600", "2000", "-", "+20", "０２００", "２００", "000", "20", "-20"} {
		checkBad(t, "status "+s, line("h", okTime, okReq, s, "1"), ReasonStatus)
	}

	for _, s := range []string{"-5", "+5", "-0", "--", "1.5", "1,024", "0x1f", "1e3", "١٢", "1000000000000", "0000000000000", "12a", "a"} {
		checkBad(t, "bytes "+s, line("h", okTime, okReq, "200", s), ReasonBytes)
	}

	// The first failing rule in README order is the reason.
	checkBad(t, "time before request", line("h", "x", "x", "x", "x"), ReasonTime)
	checkBad(t, "request before status", line("h", okTime, "x", "x", "x"), ReasonRequest)
	checkBad(t, "status before bytes", line("h", okTime, okReq, "x", "x"), ReasonStatus)
}

func TestHourKeyAgainstCalendar(t *testing.T) {
	// daysFromCivil/civilFromDays round-trip over the whole year range.
	for d := daysFromCivil(999, 12, 31); d <= daysFromCivil(9999, 1, 2); d++ {
		y, m, dd := civilFromDays(d)
		if daysFromCivil(y, m, dd) != d {
			t.Fatalf("round trip of day %d: %d-%d-%d", d, y, m, dd)
		}
	}
	if daysFromCivil(1970, 1, 1) != 0 || daysFromCivil(2000, 3, 1) != 11017 {
		t.Fatal("epoch")
	}
}
