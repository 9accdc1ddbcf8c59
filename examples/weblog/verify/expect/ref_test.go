package expect

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// refParse is a second implementation of the README rules, written
// differently on purpose (regular expressions, time.Parse, strings
// functions), used as a differential oracle for ParseLine.
func refParse(line []byte) (host, path, status string, nbytes int64, hourKey string, ok bool) {
	s := string(line)
	s = strings.TrimSuffix(s, "\r")
	if s == "" || len(s) > 65536 || !utf8.ValidString(s) {
		return
	}
	m := refLine.FindStringSubmatch(s)
	if m == nil {
		return
	}
	host, ts, req, status, bs := m[1], m[2], m[3], m[4], m[5]

	if !refTime.MatchString(ts) {
		return
	}
	t, err := time.Parse("02/Jan/2006:15:04:05 -0700", ts)
	if err != nil {
		return
	}
	zh, _ := strconv.Atoi(ts[22:24])
	zm, _ := strconv.Atoi(ts[24:26])
	if y := t.Year(); y < 1000 || y > 9998 || zh > 23 || zm > 59 {
		return
	}
	hourKey = t.UTC().Format("2006-01-02T15")

	parts := strings.Split(req, " ")
	if len(parts) != 3 || !refMethod.MatchString(parts[0]) || !refProto.MatchString(parts[2]) {
		return
	}
	target := parts[1]
	switch {
	case strings.HasPrefix(target, "/"):
	case refAbs.MatchString(target):
		rest := target[strings.Index(target, "://")+3:]
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			target = rest[i:]
		} else {
			target = ""
		}
	default:
		return
	}
	if i := strings.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	target = refSlashes.ReplaceAllString(target, "/")
	if len(target) > 1 {
		target = strings.TrimSuffix(target, "/")
	}
	if target == "" {
		target = "/"
	}
	path = target

	if !refStatus.MatchString(status) {
		return
	}
	switch {
	case bs == "-":
		nbytes = 0
	case refBytes.MatchString(bs):
		nbytes, err = strconv.ParseInt(bs, 10, 64)
		if err != nil {
			return
		}
	default:
		return
	}
	ok = true
	return
}

var (
	quotedRE   = `"((?:[^"\\]|\\.)*)"`
	refLine    = regexp.MustCompile(`(?s)^([^ ]+) [^ ]+ [^ ]+ \[([^\]]*)\] ` + quotedRE + ` ([^ ]+) ([^ ]+) ` + quotedRE + ` ` + quotedRE + `$`)
	refTime    = regexp.MustCompile(`^\d\d/(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}$`)
	refMethod  = regexp.MustCompile(`^[A-Z]+$`)
	refProto   = regexp.MustCompile(`^HTTP/\d(\.\d)?$`)
	refAbs     = regexp.MustCompile(`^[Hh][Tt][Tt][Pp][Ss]?://`)
	refSlashes = regexp.MustCompile(`/+`)
	refStatus  = regexp.MustCompile(`^[1-5]\d\d$`)
	refBytes   = regexp.MustCompile(`^\d{1,12}$`)
)

// checkAgainstRef compares ParseLine with refParse and checks invariants.
func checkAgainstRef(t *testing.T, line []byte) {
	t.Helper()
	rec, reason := ParseLine(line)
	host, path, status, nbytes, hourKey, ok := refParse(line)
	if (reason == OK) != ok {
		t.Fatalf("%q: ParseLine reason %v, reference ok=%v", line, reason, ok)
	}
	if !ok {
		return
	}
	if rec.Host != host || rec.Path != path || strconv.Itoa(rec.Status) != status || rec.Bytes != nbytes || rec.HourKey() != hourKey {
		t.Fatalf("%q:\n ParseLine %+v hour %s\n reference host=%q path=%q status=%s bytes=%d hour=%s",
			line, rec, rec.HourKey(), host, path, status, nbytes, hourKey)
	}
	p := rec.Path
	if p[0] != '/' || strings.Contains(p, "//") || strings.ContainsAny(p, "?# ") || (len(p) > 1 && strings.HasSuffix(p, "/")) {
		t.Fatalf("%q: path %q not normalised", line, p)
	}
	if again, ok := NormalizeTarget([]byte(p)); !ok || again != p {
		t.Fatalf("%q: normalising %q again gives %q, %v", line, p, again, ok)
	}
	if rec.Status < 100 || rec.Status > 599 || rec.Bytes < 0 || rec.Bytes > 999999999999 || rec.Host == "" {
		t.Fatalf("%q: bad record %+v", line, rec)
	}
	if !bytes.HasSuffix(line, []byte("\r")) {
		if rec2, r2 := ParseLine(append(append([]byte(nil), line...), '\r')); r2 != OK || rec2 != rec {
			t.Fatalf("%q: appending \\r changes the result", line)
		}
	}
}

func TestParseLineAgainstReference(t *testing.T) {
	for _, l := range handLines {
		switch l {
		case "LONG-OK":
			l = longLine("/long", MaxLineLen)
		case "LONG-BAD":
			l = longLine("/toolong", MaxLineLen+1)
		case "HUGE":
			continue
		}
		checkAgainstRef(t, []byte(l))
	}
}

func FuzzParseLine(f *testing.F) {
	for _, l := range handLines {
		if !strings.HasPrefix(l, "LONG") && l != "HUGE" {
			f.Add([]byte(l))
		}
	}
	for _, l := range []string{
		`1.2.3.4 - - [21/Nov/2026:13:00:00 +0000] "GET http://h/a//b/?q#f HTTP/1.1" 200 - "" ""`,
		`1.2.3.4 - - [21/Nov/2026:13:00:00 +0000] "GET /a\" HTTP/1.1" 200 1 "\\" "\""`,
		`1.2.3.4 - - [28/Feb/2100:23:59:59 -2359] "PATCH /x HTTP/3" 302 000000000000 "-" "-"`,
		`[ - - [01/Jan/1000:00:00:00 +0001] "A / HTTP/0.9" 100 0 "-" "-"`,
		`x x x [31/Dec/9998:23:59:59 -2359] "GET httpS:// HTTP/1.1" 599 1 "-" "-"`,
		"a b c [21/Nov/2026:13:00:00 +0000] \"GET /\x80 HTTP/1.1\" 200 1 \"-\" \"-\"",
	} {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkAgainstRef(t, line)
	})
}
