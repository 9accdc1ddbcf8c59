package main

import (
	"strconv"
	"time"
)

// malformed builds a malformed line of kind k, starting from the well-formed
// parts p of the current line.
func (g *generator) malformed(k lineKind, p *parts) []byte {
	switch k {
	case mTruncated:
		line := g.assemble(p)
		return line[:1+g.r.IntN(len(line)-1)]
	case mMissingQuote:
		line := g.assemble(p)
		var quotes []int
		for i, c := range line {
			if c == '"' {
				quotes = append(quotes, i)
			}
		}
		q := quotes[g.r.IntN(len(quotes))]
		return append(line[:q], line[q+1:]...)
	case mBadStatus:
		p.status = []byte(badStatuses[g.r.IntN(len(badStatuses))])
		return g.assemble(p)
	case mBadTimestamp:
		g.badTimestamp(p)
		return g.assemble(p)
	case mBadBytes:
		p.bytes = []byte(badBytes[g.r.IntN(len(badBytes))])
		return g.assemble(p)
	case mEmpty:
		if g.r.IntN(2) == 0 {
			return g.line[:0]
		}
		return append(g.line[:0], '\r')
	case mGarbage:
		return g.garbage()
	case mBadRequest:
		g.badRequest(p)
		return g.assemble(p)
	case mInvalidUTF8:
		return g.invalidUTF8(p)
	case mBadFields:
		return g.badFields(p)
	case mTooLong:
		line := g.assemble(p)
		n := maxLine + 1
		if g.r.IntN(2) == 0 {
			n += g.r.IntN(2 * maxLine)
		}
		return g.pad(line, n, true)
	}
	panic("unknown kind " + k.String())
}

var badStatuses = []string{"2x0", "99", "600", "099", "2000", "-", "20O", "1e2", "+20", "２００", "0", "999", "20", "0x1"}

var badBytes = []string{"12a", "-5", "+5", "1.5", "0x1f", "1234567890123", "99999999999999999999", "--", "1,024", "١٢٣", "1e3", "NaN", "-0"}

func (g *generator) badTimestamp(p *parts) {
	ts := append([]byte(nil), p.ts...) // p.ts may be shared
	set := func(i int, s string) []byte { copy(ts[i:], s); return ts }
	cat := func(a ...string) []byte {
		var b []byte
		for _, s := range a {
			b = append(b, s...)
		}
		return b
	}
	s := string(ts)
	switch g.r.IntN(25) {
	case 0:
		p.ts = ts[:20] // no zone
	case 1:
		p.ts = set(11, " ")
	case 2:
		p.ts = time.Unix(0, g.now).UTC().AppendFormat(nil, time.RFC3339)
	case 3:
		p.ts = set(0, "32")
	case 4:
		p.ts = cat("31/Apr/", s[7:])
	case 5:
		p.ts = cat("29/Feb/2025", s[11:])
	case 6:
		p.ts = set(3, "Foo")
	case 7:
		for i := 3; i < 6; i++ {
			if ts[i] >= 'A' && ts[i] <= 'Z' {
				ts[i] += 'a' - 'A'
			}
		}
		p.ts = ts
	case 8:
		for i := 3; i < 6; i++ {
			if ts[i] >= 'a' && ts[i] <= 'z' {
				ts[i] -= 'a' - 'A'
			}
		}
		p.ts = ts
	case 9:
		p.ts = set(12, "24")
	case 10:
		p.ts = set(15, "60")
	case 11:
		p.ts = set(18, "60")
	case 12:
		p.ts = cat(s[:20], ".123", s[20:])
	case 13:
		p.ts = cat(s[:22], "00:00")
	case 14:
		p.ts = cat(s[:21], "UTC")
	case 15:
		p.ts = ts[:0]
	case 16:
		p.ts = []byte("-")
	case 17:
		p.tsField = ts // no brackets
	case 18:
		p.ts = cat(s[:7], "0999", s[11:])
	case 19:
		p.ts = cat(s[:7], "9999", s[11:])
	case 20:
		p.ts = set(21, "+2400")
	case 21:
		p.ts = cat(s[:12], s[13:]) // one-digit hour
	case 22:
		p.tsField = cat("[", s) // no closing bracket
	case 23:
		p.ts = cat(s[:21], "0000") // no sign
	default:
		p.ts = cat(s[:7], s[9:]) // two-digit year
	}
}

var badRequests = []string{
	"-", "", "GET", "GET /", "GET  /a HTTP/1.1", "GET /a b HTTP/1.1", "get /a HTTP/1.1", "G3T /a HTTP/1.1",
	"GET /a FTP/1.0", "GET /a HTTP/1.1x", "GET /a HTTP/11", "GET /a HTTP/1.", "GET /a http/1.1", "GET /a HTTP/",
	"GET a/b HTTP/1.1", "OPTIONS * HTTP/1.1", "CONNECT example.com:443 HTTP/1.1", `\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03`,
	"GET /a HTTP/1.1 extra", "GET\t/a\tHTTP/1.1", "GET ftp://example.com/a HTTP/1.1", " GET /a HTTP/1.1", "GET /a HTTP/1.1 ",
	"GET ?x=1 HTTP/1.1", "GET example.com/a HTTP/1.1", "GET http:/example.com/a HTTP/1.1", "GET https:example.com HTTP/1.1",
	"GET #top HTTP/1.1",
}

func (g *generator) badRequest(p *parts) {
	switch g.r.IntN(4) {
	case 0: // HTTP/0.9 style: no protocol
		p.request = append(append([]byte(p.method), ' '), p.target...)
	case 1: // unescaped space inside the target
		p.request = append(append([]byte(p.method), ' '), p.target...)
		p.request = append(p.request, " x HTTP/1.1"...)
	default:
		p.request = []byte(badRequests[g.r.IntN(len(badRequests))])
	}
}

var invalidSeqs = []string{"\xff", "\xfe", "\xc3\x28", "\xed\xa0\x80", "\xe2\x82", "\xc0\xaf", "\xf5\x80\x80\x80", "\x80"}

func (g *generator) invalidUTF8(p *parts) []byte {
	seq := invalidSeqs[g.r.IntN(len(invalidSeqs))]
	switch g.r.IntN(3) {
	case 0: // in the path
		t := append([]byte(nil), p.target...)
		i := 1 + g.r.IntN(len(t))
		p.target = append(t[:i:i], append([]byte(seq), t[i:]...)...)
		return g.assemble(p)
	case 1: // Latin-1 user name or agent
		if g.r.IntN(2) == 0 {
			p.user = []byte("fr\xe9d\xe9ric")
		} else {
			p.agent = []byte("Mozilla/5.0 (compatible; R\xe9sum\xe9Bot/1.0)")
		}
		return g.assemble(p)
	default:
		line := g.assemble(p)
		i := g.r.IntN(len(line) + 1)
		out := make([]byte, 0, len(line)+len(seq))
		out = append(out, line[:i]...)
		out = append(out, seq...)
		return append(out, line[i:]...)
	}
}

func (g *generator) badFields(p *parts) []byte {
	line := g.assemble(p)
	insert := func(i int, s string) []byte {
		out := make([]byte, 0, len(line)+len(s))
		out = append(out, line[:i]...)
		out = append(out, s...)
		return append(out, line[i:]...)
	}
	switch g.r.IntN(10) {
	case 0: // two spaces between two fields
		return insert(g.seps[g.r.IntN(len(g.seps))], " ")
	case 1: // tab instead of a space
		line[g.seps[g.r.IntN(len(g.seps))]] = '\t'
		return line
	case 2:
		return insert(0, " ")
	case 3:
		return append(line, ' ')
	case 4: // an extra field
		return append(line, [...]string{` "-"`, ` 1234`, ` "extra"`, ` -`}[g.r.IntN(4)]...)
	case 5: // Common Log Format: no referer or user agent
		return line[:g.seps[6]]
	case 6: // no referer
		return append(line[:g.seps[6]], line[g.seps[7]:]...)
	case 7: // no ident
		return append(line[:g.seps[0]], line[g.seps[1]:]...)
	case 8: // two carriage returns: only one is stripped
		return append(line, '\r', '\r')
	default: // no host
		return line[g.seps[0]+1:]
	}
}

var garbageLines = []string{
	"-",
	"hello",
	"<html><body>502 Bad Gateway</body></html>",
	`{"level":"info","msg":"GET /index.html","status":200}`,
	"2026/11/21 13:55:36 [error] 1234#0: *5 open() \"/var/www/favicon.ico\" failed (2: No such file or directory)",
	"[Sat Nov 21 13:55:36.123456 2026] [core:error] [pid 1234] [client 203.0.113.7:51234] AH00126: Invalid URI in request",
	"203.0.113.7",
	"203.0.113.7 - -",
	`"GET / HTTP/1.1" 200 512`,
	"#Fields: date time c-ip cs-method cs-uri-stem sc-status",
	"日本語のログ行です ✓",
	"\x00\x01\x02\x1b[31mred\x1b[0m",
	"\t",
	"   ",
	" \t ",
}

func (g *generator) garbage() []byte {
	if g.r.IntN(3) == 0 {
		n := 1 + g.r.IntN(120)
		b := g.line[:0]
		for i := 0; i < n; i++ {
			c := byte(' ' + g.r.IntN(95))
			if c == '"' {
				c = '\''
			}
			b = append(b, c)
		}
		return b
	}
	s := garbageLines[g.r.IntN(len(garbageLines))]
	if g.r.IntN(4) == 0 {
		s += " " + strconv.Itoa(g.r.IntN(1000))
	}
	return append(g.line[:0], s...)
}
