package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// lineKind says what the generator meant a line to be. Everything except
// wellFormed is a kind of malformed line.
type lineKind uint8

const (
	wellFormed    lineKind = iota
	mTruncated             // a well-formed line cut short
	mMissingQuote          // one of the six quotes removed
	mBadStatus             // "2x0", "99", "600", ...
	mBadTimestamp          // anything but DD/Mon/YYYY:hh:mm:ss +zzzz, valid
	mBadBytes              // "12a", "-5", 13 digits, ...
	mEmpty                 // "" or "\r"
	mGarbage               // not an access-log line at all
	mBadRequest            // request not METHOD TARGET PROTOCOL, or bad target
	mInvalidUTF8           // invalid UTF-8 bytes somewhere
	mBadFields             // extra/missing fields, double spaces, tabs, CLF
	mTooLong               // longer than 64 KiB
	numKinds
)

var kindNames = [numKinds]string{"well_formed", "truncated", "missing_quote", "bad_status", "bad_timestamp",
	"bad_bytes", "empty", "garbage", "bad_request", "invalid_utf8", "bad_fields", "too_long"}

func (k lineKind) String() string { return kindNames[k] }

// Relative weights of the malformed kinds (after the first numKinds-1
// malformed lines, which cycle through every kind once). Too-long lines are
// rare because each costs more than 64 KiB.
var kindWeights = [numKinds]float64{
	mTruncated: 14, mMissingQuote: 12, mBadStatus: 12, mBadTimestamp: 12, mBadBytes: 10, mEmpty: 8,
	mGarbage: 8, mBadRequest: 12, mInvalidUTF8: 8, mBadFields: 6, mTooLong: 0.3,
}

const (
	maxLine      = 64 * 1024 // longest well-formed line
	hugeLine     = 1 << 20   // file_source's largest max_line_bytes: a longer line never reaches the parser
	pJitter      = 0.03      // a line's timestamp goes back a few seconds (never before its UTC hour)
	pAtLimit     = 1.0 / 50000
	tsLayout     = "02/Jan/2006:15:04:05 -0700"
	defaultStart = "2026-11-21T00:00:00Z"
)

type config struct {
	lines     int
	malformed float64
	seed      uint64
	start     time.Time
	span      time.Duration
	ips       int
	paths     int
	crlf      float64
	huge      int // malformed lines over the reader's 1 MiB limit
}

type generator struct {
	cfg   config
	r     *rand.Rand
	zone  *time.Location
	paths []string
	size  []int64 // typical response size per path
	ips   []string
	pathZ *rand.Zipf
	ipZ   *rand.Zipf

	now      int64 // base time, ns since epoch, non-decreasing
	avgStep  int64
	left     int // lines still to generate
	badLeft  int // malformed lines still to generate
	badSoFar int
	hugeLeft int // of badLeft, lines over hugeLine still to generate

	tsSec int64
	tsBuf []byte

	// scratch
	target []byte
	num    []byte
	line   []byte
	seps   [8]int // positions of the 8 field-separating spaces in line
}

func newGenerator(cfg config) *generator {
	g := &generator{
		cfg:   cfg,
		r:     rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)),
		left:  cfg.lines,
		tsSec: math.MinInt64,
	}
	g.badLeft = int(math.Round(float64(cfg.lines) * cfg.malformed))
	if g.badLeft > cfg.lines {
		g.badLeft = cfg.lines
	}
	g.hugeLeft = min(cfg.huge, g.badLeft)
	_, off := cfg.start.Zone()
	g.zone = time.FixedZone("", off)
	g.now = cfg.start.UnixNano()
	if cfg.lines > 0 {
		g.avgStep = int64(cfg.span) / int64(cfg.lines)
	}
	g.makePaths(max(cfg.paths, 1))
	g.makeIPs(max(cfg.ips, 1))
	g.pathZ = rand.NewZipf(g.r, 1.1, 2, uint64(len(g.paths)-1))
	g.ipZ = rand.NewZipf(g.r, 1.05, 20, uint64(len(g.ips)-1))
	return g
}

// ---- vocabulary ----

var words = strings.Fields(`about account admin alpha archive article beta blog board cart catalog
	checkout city cloud contact data design dev docs download editor event faq feature feed
	forum gallery guide help home image index install jobs kernel labs learn legal library
	login logout map media news north orders page partner people photo plan policy press
	pricing product profile project query release report research review river search
	security settings shop signup solar south status store support team terms tools topic
	travel update upload user video view wiki winter world zone`)

var fixedPaths = []string{"/", "/favicon.ico", "/index.html", "/robots.txt", "/apple-touch-icon.png"}

// encodedWords are percent-encoded path segments; they are NOT decoded.
var encodedWords = []string{"caf%C3%A9", "na%C3%AFve", "%E6%97%A5%E6%9C%AC", "a%20b", "100%25", "%2Fetc%2Fpasswd", "r%C3%A9sum%C3%A9"}

var users = []string{"frank", "alice", "bob", "carol", "admin", "j.doe@example.com"}

var agents = []string{
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Macintosh; Intel Mac OS X 14_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15",
	"Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
	"Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
	"Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile Safari/537.36",
	"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
	"Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
	"curl/8.11.0",
	"Wget/1.24.5",
	"python-requests/2.32.3",
	"Go-http-client/1.1",
	"-",
	"",
}

var referHosts = []string{"https://www.example.com", "http://example.com", "https://news.example.org"}

var absPrefixes = []string{"http://www.example.com", "https://example.com:8443", "HTTP://WWW.EXAMPLE.COM", "http://user@example.com", "Https://example.com"}

func (g *generator) word() string { return words[g.r.IntN(len(words))] }

func (g *generator) makePaths(n int) {
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			g.paths = append(g.paths, p)
		}
	}
	for _, p := range fixedPaths {
		if len(g.paths) < n {
			add(p)
		}
	}
	for tries := 0; len(g.paths) < n; tries++ {
		var p string
		switch g.r.IntN(20) {
		case 0, 1, 2:
			p = "/docs/" + g.word() + ".html"
		case 3, 4:
			p = "/blog/" + strconv.Itoa(2020+g.r.IntN(7)) + "/" + strconv.Itoa(10+g.r.IntN(3)) + "/" + g.word() + "-" + g.word()
		case 5:
			p = "/static/js/" + g.word() + "." + strconv.FormatUint(g.r.Uint64()>>32, 16) + ".js"
		case 6:
			p = "/static/css/" + g.word() + "." + strconv.FormatUint(g.r.Uint64()>>32, 16) + ".css"
		case 7, 8:
			p = "/images/" + g.word() + "/" + g.word() + [...]string{".png", ".jpg", ".webp"}[g.r.IntN(3)]
		case 9, 10:
			p = "/api/v1/" + g.word() + "/" + strconv.Itoa(g.r.IntN(10000))
		case 11, 12:
			p = "/products/" + g.word() + "-" + strconv.Itoa(g.r.IntN(1000))
		case 13:
			p = "/search/" + encodedWords[g.r.IntN(len(encodedWords))]
			if g.r.IntN(2) == 0 {
				p += "/" + g.word()
			}
		case 14: // same words, different case: distinct keys
			w := g.word()
			p = "/Docs/" + strings.ToUpper(w[:1]) + w[1:]
		case 15:
			p = "/wiki/" + g.word() + "_(" + g.word() + ")"
		case 16: // dot segments are NOT resolved
			if g.r.IntN(4) == 0 {
				p = "/docs/" + [...]string{".", ".."}[g.r.IntN(2)] + "/" + g.word()
			} else {
				p = "/" + g.word() + "/" + g.word()
			}
		default:
			p = "/" + g.word()
		}
		if tries > 100*n { // vocabulary exhausted: make it unique
			p += "-" + strconv.Itoa(len(g.paths))
		}
		add(p)
	}
	g.size = make([]int64, len(g.paths))
	for i := range g.size {
		g.size[i] = int64(math.Exp(5 + 8*g.r.Float64())) // ~150 B .. ~450 KB
	}
}

func (g *generator) makeIPs(n int) {
	seen := map[string]bool{}
	for len(g.ips) < n {
		var ip string
		if g.r.IntN(10) == 0 {
			// IPv6, canonical lower-case compressed form.
			ip = "2001:db8:" + strconv.FormatUint(uint64(g.r.IntN(0x10000)), 16) + ":" +
				strconv.FormatUint(uint64(1+g.r.IntN(0xffff)), 16) + "::" + strconv.FormatUint(uint64(1+g.r.IntN(0xffff)), 16)
		} else {
			ip = strconv.Itoa(1+g.r.IntN(223)) + "." + strconv.Itoa(g.r.IntN(256)) + "." +
				strconv.Itoa(g.r.IntN(256)) + "." + strconv.Itoa(1+g.r.IntN(254))
		}
		if !seen[ip] {
			seen[ip] = true
			g.ips = append(g.ips, ip)
		}
	}
}

// ---- lines ----

// parts are the fields of a line before assembly. A nil override means
// "use the normal value".
type parts struct {
	host, ident, user []byte
	ts                []byte // between the brackets
	tsField           []byte // override for the whole "[...]" field
	method            string
	target            []byte
	proto             string
	request           []byte // override for the request (between the quotes)
	status            []byte
	bytes             []byte
	referer           []byte
	agent             []byte
}

var (
	statusTable = func() []string { // per mille
		var t []string
		for _, e := range []struct {
			s string
			n int
		}{{"200", 800}, {"304", 80}, {"404", 55}, {"301", 25}, {"302", 10}, {"500", 12}, {"206", 5}, {"403", 8}, {"503", 5}} {
			for i := 0; i < e.n; i++ {
				t = append(t, e.s)
			}
		}
		return t
	}()
	dash = []byte("-")
)

// next returns the next line, without its "\n" (well-formed lines may end in
// "\r"), and what it was meant to be.
func (g *generator) next() ([]byte, lineKind) {
	bad := g.left > 0 && g.r.IntN(g.left) < g.badLeft
	g.left--
	g.advance()
	var p parts
	g.wellFormedParts(&p)
	if !bad {
		line := g.assemble(&p)
		if g.r.Float64() < pAtLimit {
			line = g.pad(line, maxLine, true)
		}
		if g.r.Float64() < g.cfg.crlf {
			line = append(line, '\r')
		}
		g.line = line
		return line, wellFormed
	}
	// Huge lines are drawn only when asked for, so that without them the
	// output stays what it was for the same flags.
	if g.hugeLeft > 0 && g.r.IntN(g.badLeft) < g.hugeLeft {
		g.badLeft--
		g.hugeLeft--
		g.line = g.pad(g.assemble(&p), hugeLine+1+g.r.IntN(hugeLine), true)
		return g.line, mTooLong
	}
	g.badLeft--
	var k lineKind
	if g.badSoFar < int(numKinds)-1 {
		k = lineKind(1 + g.badSoFar) // every kind at least once, early
	} else {
		k = g.pickKind()
	}
	g.badSoFar++
	line := g.malformed(k, &p)
	g.line = line
	return line, k
}

func (g *generator) pickKind() lineKind {
	var total float64
	for _, w := range kindWeights {
		total += w
	}
	x := g.r.Float64() * total
	for k := lineKind(1); k < numKinds; k++ {
		if x < kindWeights[k] {
			return k
		}
		x -= kindWeights[k]
	}
	return mGarbage
}

// advance moves the base time forward.
func (g *generator) advance() {
	if g.left == g.cfg.lines-1 {
		return // the first line is at -start
	}
	if g.avgStep > 0 {
		g.now += g.r.Int64N(2*g.avgStep + 1)
	}
}

// timestamp returns the formatted timestamp of the current line: the base
// time, sometimes a few seconds earlier but never before the start of the
// base time's UTC hour, so UTC hours never go backwards in the file.
func (g *generator) timestamp() []byte {
	sec := floorDiv(g.now, int64(time.Second))
	if g.r.Float64() < pJitter {
		hourStart := floorDiv(sec, 3600) * 3600
		sec = max(sec-1-g.r.Int64N(15), hourStart)
		return time.Unix(sec, 0).In(g.zone).AppendFormat(nil, tsLayout)
	}
	if sec != g.tsSec {
		g.tsSec = sec
		g.tsBuf = time.Unix(sec, 0).In(g.zone).AppendFormat(g.tsBuf[:0], tsLayout)
	}
	return g.tsBuf
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (g *generator) wellFormedParts(p *parts) {
	p.host = []byte(g.ips[g.ipZ.Uint64()])
	p.ident = dash
	p.user = dash
	if g.r.IntN(33) == 0 {
		p.user = []byte(users[g.r.IntN(len(users))])
	}
	p.ts = g.timestamp()
	pi := int(g.pathZ.Uint64())
	switch x := g.r.IntN(1000); {
	case x < 930:
		p.method = "GET"
	case x < 970:
		p.method = "POST"
	case x < 995:
		p.method = "HEAD"
	default:
		p.method = [...]string{"PUT", "DELETE", "OPTIONS", "PATCH"}[g.r.IntN(4)]
	}
	p.target = g.decorate(g.target[:0], g.paths[pi])
	g.target = p.target
	switch x := g.r.IntN(100); {
	case x < 85:
		p.proto = "HTTP/1.1"
	case x < 95:
		p.proto = "HTTP/2.0"
	default:
		p.proto = "HTTP/1.0"
	}
	status := statusTable[g.r.IntN(len(statusTable))]
	p.status = []byte(status)
	p.bytes = g.bytesFor(status, p.method, pi)
	switch x := g.r.IntN(100); {
	case x < 45:
		p.referer = dash
	case x < 80:
		p.referer = []byte(referHosts[g.r.IntN(len(referHosts))] + g.paths[g.pathZ.Uint64()])
	case x < 95:
		p.referer = []byte("https://www.google.com/search?q=" + g.word() + "+" + g.word())
	case x < 98:
		p.referer = []byte("http://t.co/" + strconv.FormatUint(g.r.Uint64()>>40, 36))
	default:
		p.referer = nil // empty ""
	}
	p.agent = []byte(agents[g.r.IntN(len(agents))])
}

func (g *generator) bytesFor(status, method string, pi int) []byte {
	if method == "HEAD" {
		return dash
	}
	var n int64
	switch status {
	case "304":
		return dash
	case "200":
		switch g.r.IntN(200) {
		case 0:
			return dash
		case 1:
			return []byte("0")
		}
		n = g.size[pi] + g.r.Int64N(g.size[pi]/10+1)
	case "206":
		n = 1 + g.r.Int64N(g.size[pi])
	case "301", "302":
		n = 220 + g.r.Int64N(40)
	case "500", "503":
		if g.r.IntN(3) == 0 {
			return dash
		}
		n = 400 + g.r.Int64N(300)
	default:
		n = 190 + g.r.Int64N(330)
	}
	g.num = strconv.AppendInt(g.num[:0], n, 10)
	return g.num
}

// decorate turns a normalised path into a request target that normalises
// back to it.
func (g *generator) decorate(dst []byte, path string) []byte {
	x := g.r.IntN(1000)
	if x < 10 { // absolute-form
		dst = append(dst, absPrefixes[g.r.IntN(len(absPrefixes))]...)
		if path == "/" && g.r.IntN(2) == 0 {
			path = "" // "http://host" alone means "/"
		}
	}
	switch {
	case x >= 10 && x < 30 && len(path) > 1: // repeated slashes
		i := g.r.IntN(len(path))
		for path[i] != '/' {
			i--
		}
		dst = append(dst, path[:i]...)
		dst = append(dst, "//"[:1+g.r.IntN(2)]...)
		dst = append(dst, path[i:]...)
	case x >= 30 && x < 70: // trailing slash
		dst = append(dst, path...)
		if path != "/" {
			dst = append(dst, '/')
		}
	default:
		dst = append(dst, path...)
	}
	switch y := g.r.IntN(1000); {
	case y < 250:
		dst = append(dst, '?')
		switch g.r.IntN(4) {
		case 0:
			dst = append(dst, "q="...)
			dst = append(dst, g.word()...)
		case 1:
			dst = append(dst, "utm_source=newsletter&utm_medium=email"...)
		case 2:
			dst = append(dst, "page="...)
			dst = strconv.AppendInt(dst, int64(1+g.r.IntN(20)), 10)
		default:
			dst = append(dst, "x=1&next=/a//b/"...)
		}
	case y < 255:
		dst = append(dst, '?')
	case y < 260:
		dst = append(dst, "#section-2"...)
	case y < 263:
		dst = append(dst, "?a=1#top/"...)
	case y < 265:
		dst = append(dst, "#frag?not=query"...)
	}
	return dst
}

// assemble writes the combined-format line for p into g.line and records
// the separator positions.
func (g *generator) assemble(p *parts) []byte {
	b := g.line[:0]
	b = append(b, p.host...)
	g.seps[0] = len(b)
	b = append(b, ' ')
	b = append(b, p.ident...)
	g.seps[1] = len(b)
	b = append(b, ' ')
	b = append(b, p.user...)
	g.seps[2] = len(b)
	b = append(b, ' ')
	if p.tsField != nil {
		b = append(b, p.tsField...)
	} else {
		b = append(b, '[')
		b = append(b, p.ts...)
		b = append(b, ']')
	}
	g.seps[3] = len(b)
	b = append(b, ' ', '"')
	if p.request != nil {
		b = append(b, p.request...)
	} else {
		b = append(b, p.method...)
		b = append(b, ' ')
		b = append(b, p.target...)
		b = append(b, ' ')
		b = append(b, p.proto...)
	}
	b = append(b, '"')
	g.seps[4] = len(b)
	b = append(b, ' ')
	b = append(b, p.status...)
	g.seps[5] = len(b)
	b = append(b, ' ')
	b = append(b, p.bytes...)
	g.seps[6] = len(b)
	b = append(b, ' ', '"')
	b = append(b, p.referer...)
	b = append(b, '"')
	g.seps[7] = len(b)
	b = append(b, ' ', '"')
	b = append(b, p.agent...)
	b = append(b, '"')
	g.line = b
	return b
}

const filler = "abcdefghijklmnopqrstuvwxyz0123456789"

// pad grows a well-formed line to exactly n bytes, in the query string
// (inQuery, which leaves the path unchanged) or in the user agent.
func (g *generator) pad(line []byte, n int, inQuery bool) []byte {
	extra := n - len(line)
	if extra <= 6 {
		return line
	}
	var ins []byte
	at := len(line) - 1 // before the closing quote of the user agent
	if inQuery && g.r.IntN(2) == 0 {
		// End of the target: the second space inside the request.
		q := g.seps[3] + 2
		sp := 0
		for i := q; i < len(line); i++ {
			if line[i] == ' ' {
				sp++
				if sp == 2 {
					at = i
					break
				}
			}
		}
		if bytes.ContainsAny(line[q:at], "?#") {
			ins = append(ins, "&pad="...)
		} else {
			ins = append(ins, "?pad="...)
		}
	} else {
		ins = append(ins, " pad/"...)
	}
	for len(ins) < extra {
		ins = append(ins, filler[len(ins)%len(filler)])
	}
	out := make([]byte, 0, n)
	out = append(out, line[:at]...)
	out = append(out, ins...)
	out = append(out, line[at:]...)
	return out
}
