package flowlets

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/flowrun/flowrun/examples/weblog/verify/expect"
)

var hourRE = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3])$`)

// FuzzParse checks that Parse never panics and that what it accepts has
// the shape the README promises.
func FuzzParse(f *testing.F) {
	addParseSeeds(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p LineParser
		l, r, ok := p.Parse(raw)
		if !ok {
			if r < ReasonEmpty || r > ReasonBytes {
				t.Fatalf("reason %d", r)
			}
			return
		}
		b := bytes.TrimSuffix(raw, []byte("\r"))
		switch {
		case len(b) == 0 || len(b) > MaxLineBytes || !utf8.Valid(b):
			t.Fatal("accepted a line rule 1–3 reject")
		case len(l.Host) == 0 || bytes.IndexByte(l.Host, ' ') >= 0 || !bytes.HasPrefix(b, l.Host):
			t.Fatalf("host %q", l.Host)
		case len(l.Path) == 0 || l.Path[0] != '/' || bytes.Contains(l.Path, []byte("//")) ||
			bytes.ContainsAny(l.Path, "?# ") || (len(l.Path) > 1 && l.Path[len(l.Path)-1] == '/'):
			t.Fatalf("path %q", l.Path)
		case l.Status[0] < '1' || l.Status[0] > '5':
			t.Fatalf("status %q", l.Status)
		case l.Bytes < 0 || l.Bytes >= 1e12:
			t.Fatalf("bytes %d", l.Bytes)
		case !hourRE.Match(l.Hour[:]):
			t.Fatalf("hour %q", l.Hour)
		}
		// A second parser (no cache) agrees.
		var q LineParser
		l2, _, ok2 := q.Parse(raw)
		if !ok2 || l2.Hour != l.Hour || !bytes.Equal(l2.Path, l.Path) {
			t.Fatal("parsers disagree")
		}
	})
}

func addParseSeeds(f *testing.F) {
	f.Add([]byte(okLine()))
	f.Add([]byte(line("h", "01/Jan/1000:00:00:00 +2359", "GET http://x//a//?q HTTP/2", "599", "-")))
	f.Add([]byte(line("::1", "29/Feb/2024:23:59:59 -2359", "PROPFIND HTTPS://u@h:1?x=/y#z HTTP/1.0", "100", "000000000012")))
	f.Add([]byte(`h - - [21/Nov/2026:13:45:01 +0000] "GET /a\"b HTTP/1.1" 200 1 "r\\" "a\"\\"`))
	f.Add([]byte("\r"))
}

// FuzzAgainstVerifier: the parser and the independent verifier
// (verify/expect, imported by this test only) classify every line alike
// and agree on what a well-formed one contributes.
func FuzzAgainstVerifier(f *testing.F) {
	addParseSeeds(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var p LineParser
		l, _, ok := p.Parse(raw)
		rec, reason := expect.ParseLine(raw)
		if ok != (reason == expect.OK) {
			t.Fatalf("%q: parser says well-formed %v, verifier %v", raw, ok, reason)
		}
		if ok && (string(l.Host) != rec.Host || string(l.Path) != rec.Path || string(l.Status[:]) != strconv.Itoa(rec.Status) ||
			l.Bytes != rec.Bytes || string(l.Hour[:]) != rec.HourKey()) {
			t.Fatalf("%q: parser %q %q %s %d %s, verifier %+v %s", raw, l.Host, l.Path, l.Status[:], l.Bytes, l.Hour[:], rec, rec.HourKey())
		}
	})
}
