package flowlets

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// MaxLineBytes is the longest well-formed line, not counting "\n" and one
// stripped "\r" (README §2).
const MaxLineBytes = 65536

// Line is what a well-formed log line contributes (README §9). Host and the
// fields of the line it was parsed from alias the input; Path may alias the
// input or the Parser's scratch buffer. Copy what must outlive the next
// ParseLine call or the input.
type Line struct {
	Host   []byte
	Path   []byte  // normalised (README §6)
	Status [3]byte // three ASCII digits, 100 … 599
	Bytes  int64
	Hour   [HourKeyLen]byte // UTC hour key, YYYY-MM-DDThh
}

// HourKeyLen is the length of an hour key, "YYYY-MM-DDThh".
const HourKeyLen = 13

// Reason names the first rule a malformed line breaks, in README §2 order.
type Reason uint8

// Reasons, in the order they are tested.
const (
	ReasonEmpty Reason = iota + 1
	ReasonTooLong
	ReasonUTF8
	ReasonFields
	ReasonTime
	ReasonRequest
	ReasonStatus
	ReasonBytes
)

var reasonNames = [...]string{
	ReasonEmpty:   "empty",
	ReasonTooLong: "too long",
	ReasonUTF8:    "invalid UTF-8",
	ReasonFields:  "fields",
	ReasonTime:    "timestamp",
	ReasonRequest: "request",
	ReasonStatus:  "status",
	ReasonBytes:   "bytes",
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", r)
}

// LineParser parses log lines. It keeps a scratch buffer and a one-entry
// cache of the last timestamp's hour key, so it must not be shared between
// goroutines; the zero value is ready to use.
type LineParser struct {
	scratch []byte

	// Hour-key cache: the timestamp's bytes that decide the hour (all but
	// the seconds) and the key they gave.
	lastTime [tzCacheLen]byte
	lastHour [HourKeyLen]byte
	cached   bool
}

// Parse classifies one line: its bytes without the "\n" that ended it (a
// trailing "\r" is still there; Parse strips exactly one). It returns the
// line's contribution, or ok=false and the first rule it breaks.
func (p *LineParser) Parse(raw []byte) (l Line, reason Reason, ok bool) {
	b := raw
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	switch {
	case len(b) == 0:
		return l, ReasonEmpty, false
	case len(b) > MaxLineBytes:
		return l, ReasonTooLong, false
	case !utf8.Valid(b):
		return l, ReasonUTF8, false
	}
	var f fields
	if !splitFields(b, &f) {
		return l, ReasonFields, false
	}
	if !p.hourKey(f.time, &l.Hour) {
		return l, ReasonTime, false
	}
	target, ok := checkRequest(f.request)
	if !ok {
		return l, ReasonRequest, false
	}
	if !checkStatus(f.status) {
		return l, ReasonStatus, false
	}
	n, ok := parseBytes(f.bytes)
	if !ok {
		return l, ReasonBytes, false
	}
	l.Host = f.host
	l.Path = p.normalise(target)
	copy(l.Status[:], f.status)
	l.Bytes = n
	return l, 0, true
}

// fields are the values of the nine fields of README §3 that matter
// (IDENT, USER, REFERER and AGENT are only checked for shape).
type fields struct {
	host, time, request, status, bytes []byte
}

// splitFields scans HOST IDENT USER [TIME] "REQUEST" STATUS BYTES "REFERER"
// "AGENT" left to right, each separated by exactly one space, AGENT's
// closing quote being the last byte.
func splitFields(b []byte, f *fields) bool {
	pos := 0
	var ok bool
	// token reads a non-empty run of non-space bytes followed by a space.
	token := func() []byte {
		i := bytes.IndexByte(b[pos:], ' ')
		if i <= 0 {
			ok = false
			return nil
		}
		t := b[pos : pos+i]
		pos += i + 1
		return t
	}
	// quoted reads "VALUE" (backslash escapes the next byte, verbatim) and
	// returns the value; pos ends just after the closing quote.
	quoted := func() []byte {
		if pos >= len(b) || b[pos] != '"' {
			ok = false
			return nil
		}
		start := pos + 1
		for i := start; ; {
			j := bytes.IndexByte(b[i:], '"')
			if j < 0 {
				ok = false
				return nil
			}
			q := i + j
			k := bytes.IndexByte(b[i:q], '\\')
			if k < 0 {
				pos = q + 1
				return b[start:q]
			}
			// b[i+k] escapes the byte after it, whatever it is; a backslash
			// that is the last byte leaves no closing quote.
			i += k + 2
			if i > len(b) {
				ok = false
				return nil
			}
		}
	}
	space := func() {
		if pos >= len(b) || b[pos] != ' ' {
			ok = false
			return
		}
		pos++
	}

	ok = true
	f.host = token()
	if !ok {
		return false
	}
	token() // IDENT
	if !ok {
		return false
	}
	token() // USER
	if !ok {
		return false
	}
	if pos >= len(b) || b[pos] != '[' {
		return false
	}
	end := bytes.IndexByte(b[pos+1:], ']')
	if end < 0 {
		return false
	}
	f.time = b[pos+1 : pos+1+end]
	pos += end + 2
	if space(); !ok {
		return false
	}
	if f.request = quoted(); !ok {
		return false
	}
	if space(); !ok {
		return false
	}
	if f.status = token(); !ok {
		return false
	}
	if f.bytes = token(); !ok {
		return false
	}
	if quoted(); !ok { // REFERER
		return false
	}
	if space(); !ok {
		return false
	}
	if quoted(); !ok { // AGENT
		return false
	}
	return pos == len(b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// num reads the decimal value of the ASCII digits b, or -1 if one is not.
func num(b []byte) int {
	n := 0
	for _, c := range b {
		if !isDigit(c) {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

var monthNames = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

func monthOf(b []byte) int {
	for i, m := range monthNames {
		if string(b) == m {
			return i + 1
		}
	}
	return 0
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(month, year int) int {
	switch month {
	case 2:
		if isLeap(year) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// tzCacheLen is the part of a timestamp that decides its hour key: bytes
// 0–16 (date, hour, minute) and 20–25 (space, sign, offset).
const tzCacheLen = 17 + 6

// hourKey checks a TIME value (README §4) and writes its UTC hour key.
func (p *LineParser) hourKey(t []byte, out *[HourKeyLen]byte) bool {
	if len(t) != 26 {
		return false
	}
	// Seconds never change the hour, so a timestamp that differs from the
	// previous one only there reuses its key (after checking the seconds).
	if !isDigit(t[18]) || !isDigit(t[19]) || t[18] > '5' || t[17] != ':' {
		return false
	}
	if p.cached && string(t[:17]) == string(p.lastTime[:17]) && string(t[20:]) == string(p.lastTime[17:]) {
		*out = p.lastHour
		return true
	}
	if !hourKeySlow(t, out) {
		return false
	}
	copy(p.lastTime[:17], t[:17])
	copy(p.lastTime[17:], t[20:])
	p.lastHour, p.cached = *out, true
	return true
}

func hourKeySlow(t []byte, out *[HourKeyLen]byte) bool {
	if t[2] != '/' || t[6] != '/' || t[11] != ':' || t[14] != ':' || t[17] != ':' || t[20] != ' ' {
		return false
	}
	day, month, year := num(t[0:2]), monthOf(t[3:6]), num(t[7:11])
	hour, minute, second := num(t[12:14]), num(t[15:17]), num(t[18:20])
	offH, offM := num(t[22:24]), num(t[24:26])
	switch {
	case month == 0, year < 1000 || year > 9998:
		return false
	case day < 1 || day > daysIn(month, year):
		return false
	case hour < 0 || hour > 23, minute < 0 || minute > 59, second < 0 || second > 59:
		return false
	case t[21] != '+' && t[21] != '-', offH < 0 || offH > 23, offM < 0 || offM > 59:
		return false
	}
	// Minutes since 0000-03-01 of the local time, minus the offset, give
	// the UTC instant; only whole hours matter for the key.
	mins := daysFromCivil(year, month, day)*1440 + int64(hour*60+minute)
	off := int64(offH*60 + offM)
	if t[21] == '+' {
		mins -= off
	} else {
		mins += off
	}
	days := floorDiv(mins, 1440)
	y, m, d := civilFromDays(days)
	h := int((mins - days*1440) / 60)
	put := func(i, v, w int) {
		for j := i + w - 1; j >= i; j-- {
			out[j] = byte('0' + v%10)
			v /= 10
		}
	}
	put(0, y, 4)
	out[4] = '-'
	put(5, m, 2)
	out[7] = '-'
	put(8, d, 2)
	out[10] = 'T'
	put(11, h, 2)
	return true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// daysFromCivil counts days from 1970-01-01 to y-m-d in the proleptic
// Gregorian calendar (H. Hinnant's algorithm).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400 // y ≥ 999 here, never negative
	yoe := y - era*400
	mp := (m + 9) % 12 // March = 0
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y, m, d int) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := int(z - era*146097)
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	m = mp + 3
	if m > 12 {
		m -= 12
	}
	y = yoe + int(era)*400
	if m <= 2 {
		y++
	}
	return y, m, d
}

// checkRequest checks METHOD SP TARGET SP PROTOCOL (README §5) and returns
// TARGET.
func checkRequest(r []byte) ([]byte, bool) {
	a := bytes.IndexByte(r, ' ')
	if a <= 0 {
		return nil, false
	}
	rest := r[a+1:]
	b := bytes.IndexByte(rest, ' ')
	if b <= 0 {
		return nil, false
	}
	method, target, proto := r[:a], rest[:b], rest[b+1:]
	if len(proto) == 0 || bytes.IndexByte(proto, ' ') >= 0 {
		return nil, false
	}
	for _, c := range method {
		if c < 'A' || c > 'Z' {
			return nil, false
		}
	}
	if !checkProtocol(proto) {
		return nil, false
	}
	if target[0] != '/' && schemeLen(target) == 0 {
		return nil, false
	}
	return target, true
}

func checkProtocol(p []byte) bool {
	if len(p) < 6 || string(p[:5]) != "HTTP/" || !isDigit(p[5]) {
		return false
	}
	switch len(p) {
	case 6:
		return true
	case 8:
		return p[6] == '.' && isDigit(p[7])
	}
	return false
}

// schemeLen returns the length of a leading "http://" or "https://",
// compared with ASCII letters folded only, or 0.
func schemeLen(t []byte) int {
	for _, s := range [...]string{"http://", "https://"} {
		if len(t) >= len(s) && asciiFoldEqual(t[:len(s)], s) {
			return len(s)
		}
	}
	return 0
}

// asciiFoldEqual compares b with the lower-case ASCII string s, folding
// only the ASCII letters of b.
func asciiFoldEqual(b []byte, s string) bool {
	for i := range len(s) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// normalise turns a checked TARGET into its page_views key (README §6). The
// result aliases target when nothing changes, p.scratch otherwise.
func (p *LineParser) normalise(t []byte) []byte {
	if n := schemeLen(t); n > 0 && t[0] != '/' {
		t = t[n:]
		i := 0
		for i < len(t) && t[i] != '/' && t[i] != '?' && t[i] != '#' {
			i++
		}
		t = t[i:]
	}
	for i, c := range t {
		if c == '?' || c == '#' {
			t = t[:i]
			break
		}
	}
	if bytes.Contains(t, []byte("//")) {
		out := p.scratch[:0]
		for i, c := range t {
			if c == '/' && i > 0 && t[i-1] == '/' {
				continue
			}
			out = append(out, c)
		}
		p.scratch = out
		t = out
	}
	if len(t) > 1 && t[len(t)-1] == '/' {
		t = t[:len(t)-1]
	}
	if len(t) == 0 {
		return slash
	}
	return t
}

var slash = []byte{'/'}

// checkStatus: exactly three ASCII digits, 100 … 599 (README §7).
func checkStatus(s []byte) bool {
	return len(s) == 3 && '1' <= s[0] && s[0] <= '5' && isDigit(s[1]) && isDigit(s[2])
}

// parseBytes: "-" is 0, else 1 to 12 ASCII digits (README §8).
func parseBytes(s []byte) (int64, bool) {
	if len(s) == 1 && s[0] == '-' {
		return 0, true
	}
	if len(s) == 0 || len(s) > 12 {
		return 0, false
	}
	var n int64
	for _, c := range s {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
