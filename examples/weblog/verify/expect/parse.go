package expect

import (
	"bytes"
	"strconv"
	"time"
	"unicode/utf8"
)

// MaxLineLen is the longest accepted line, in bytes, after the terminating
// "\n" and one trailing "\r" have been removed. Longer lines are malformed.
const MaxLineLen = 64 * 1024

// MaxBytesDigits is the maximum number of digits of the bytes field.
const MaxBytesDigits = 12

// Reason tells why a line is malformed. It is diagnostic only: the pipeline
// must agree on whether a line is malformed, not on the reason.
type Reason uint8

// Reasons, in the order the checks are performed.
const (
	OK          Reason = iota // well-formed
	Empty                     // empty line
	TooLong                   // longer than MaxLineLen
	InvalidUTF8               // not valid UTF-8
	Fields                    // field splitting failed (quotes, brackets, spaces, field count)
	Timestamp                 // bad [%t]
	Request                   // request line is not METHOD TARGET PROTOCOL, or bad target
	Status                    // bad status
	Bytes                     // bad bytes
	numReasons
)

var reasonNames = [...]string{"ok", "empty", "too_long", "invalid_utf8", "fields", "timestamp", "request", "status", "bytes"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Record is the information a well-formed line contributes to the results.
type Record struct {
	Host   string // client host, verbatim (visitors key)
	Path   string // normalised path (page_views key)
	Status int    // 100..599 (status_counts key is its 3-digit decimal form)
	Bytes  int64  // response bytes; "-" is 0
	Hour   int64  // UTC hour of the timestamp, as Unix seconds / 3600
}

// HourKey formats the record's UTC hour as "2006-01-02T15".
func (r Record) HourKey() string { return HourKey(r.Hour) }

// HourKey formats an hour number (Unix seconds / 3600) as "2006-01-02T15".
func HourKey(hour int64) string {
	return time.Unix(hour*3600, 0).UTC().Format("2006-01-02T15")
}

// ParseLine classifies one line. line must not contain the terminating "\n";
// a single trailing "\r" is removed here. The Record is meaningful only when
// the Reason is OK.
func ParseLine(line []byte) (Record, Reason) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	if len(line) == 0 {
		return Record{}, Empty
	}
	if len(line) > MaxLineLen {
		return Record{}, TooLong
	}
	if !utf8.Valid(line) {
		return Record{}, InvalidUTF8
	}
	f, ok := splitFields(line)
	if !ok {
		return Record{}, Fields
	}
	hour, ok := parseTimestamp(f.time)
	if !ok {
		return Record{}, Timestamp
	}
	path, ok := parseRequest(f.request)
	if !ok {
		return Record{}, Request
	}
	status, ok := parseStatus(f.status)
	if !ok {
		return Record{}, Status
	}
	nbytes, ok := parseBytes(f.bytes)
	if !ok {
		return Record{}, Bytes
	}
	return Record{Host: string(f.host), Path: path, Status: status, Bytes: nbytes, Hour: hour}, OK
}

type fields struct {
	host, time, request, status, bytes []byte
}

// splitFields implements the field splitting rule: nine fields separated by
// exactly one space each, nothing before the first or after the last.
func splitFields(s []byte) (f fields, ok bool) {
	var rest []byte = s
	token := func() ([]byte, bool) { // non-empty run of non-space bytes, then one space
		i := bytes.IndexByte(rest, ' ')
		if i <= 0 {
			return nil, false
		}
		t := rest[:i]
		rest = rest[i+1:]
		return t, true
	}
	quoted := func(last bool) ([]byte, bool) {
		if len(rest) == 0 || rest[0] != '"' {
			return nil, false
		}
		for i := 1; i < len(rest); i++ {
			switch rest[i] {
			case '\\':
				i++ // the next byte (if any) is escaped
			case '"':
				v := rest[1:i]
				after := rest[i+1:]
				if last {
					if len(after) != 0 {
						return nil, false
					}
					rest = after
					return v, true
				}
				if len(after) == 0 || after[0] != ' ' {
					return nil, false
				}
				rest = after[1:]
				return v, true
			}
		}
		return nil, false // unterminated
	}
	if f.host, ok = token(); !ok {
		return f, false
	}
	if _, ok = token(); !ok { // ident
		return f, false
	}
	if _, ok = token(); !ok { // user
		return f, false
	}
	if len(rest) == 0 || rest[0] != '[' {
		return f, false
	}
	j := bytes.IndexByte(rest, ']')
	if j < 0 || j+1 >= len(rest) || rest[j+1] != ' ' {
		return f, false
	}
	f.time = rest[1:j]
	rest = rest[j+2:]
	if f.request, ok = quoted(false); !ok {
		return f, false
	}
	if f.status, ok = token(); !ok {
		return f, false
	}
	if f.bytes, ok = token(); !ok {
		return f, false
	}
	if _, ok = quoted(false); !ok { // referer
		return f, false
	}
	if _, ok = quoted(true); !ok { // user agent
		return f, false
	}
	return f, true
}

var months = [12]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}

// digits parses s (all ASCII digits) as a decimal number.
func digits(s []byte) (int64, bool) {
	if len(s) == 0 || len(s) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func num(s []byte) (int, bool) {
	n, ok := digits(s)
	return int(n), ok
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// parseTimestamp accepts exactly "DD/Mon/YYYY:hh:mm:ss +zzzz" (26 bytes) and
// returns the UTC hour number.
func parseTimestamp(t []byte) (int64, bool) {
	// 0         1         2
	// 01234567890123456789012345
	// 21/Nov/2026:13:55:36 +0000
	if len(t) != 26 || t[2] != '/' || t[6] != '/' || t[11] != ':' || t[14] != ':' || t[17] != ':' || t[20] != ' ' {
		return 0, false
	}
	day, ok1 := num(t[0:2])
	year, ok2 := num(t[7:11])
	hh, ok3 := num(t[12:14])
	mm, ok4 := num(t[15:17])
	ss, ok5 := num(t[18:20])
	zh, ok6 := num(t[22:24])
	zm, ok7 := num(t[24:26])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return 0, false
	}
	month := 0
	for i, m := range months {
		if string(t[3:6]) == m {
			month = i + 1
			break
		}
	}
	var sign int
	switch t[21] {
	case '+':
		sign = 1
	case '-':
		sign = -1
	default:
		return 0, false
	}
	if month == 0 || year < 1000 || year > 9998 || day < 1 || day > daysIn(month, year) ||
		hh > 23 || mm > 59 || ss > 59 || zh > 23 || zm > 59 {
		return 0, false
	}
	local := time.Date(year, time.Month(month), day, hh, mm, ss, 0, time.UTC).Unix()
	utc := local - int64(sign*(zh*3600+zm*60))
	return floorDiv(utc, 3600), true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// parseRequest checks METHOD SP TARGET SP PROTOCOL and returns the normalised
// path of TARGET.
func parseRequest(r []byte) (string, bool) {
	i := bytes.IndexByte(r, ' ')
	if i < 0 {
		return "", false
	}
	method, rest := r[:i], r[i+1:]
	j := bytes.IndexByte(rest, ' ')
	if j < 0 {
		return "", false
	}
	target, proto := rest[:j], rest[j+1:]
	if len(method) == 0 || len(target) == 0 || bytes.IndexByte(proto, ' ') >= 0 {
		return "", false
	}
	for _, c := range method {
		if c < 'A' || c > 'Z' {
			return "", false
		}
	}
	if !validProto(proto) {
		return "", false
	}
	return NormalizeTarget(target)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// validProto accepts HTTP/d and HTTP/d.d.
func validProto(p []byte) bool {
	if !bytes.HasPrefix(p, []byte("HTTP/")) {
		return false
	}
	v := p[5:]
	switch len(v) {
	case 1:
		return isDigit(v[0])
	case 3:
		return isDigit(v[0]) && v[1] == '.' && isDigit(v[2])
	}
	return false
}

// hasPrefixFold reports whether s starts with prefix, ASCII case-insensitively.
// prefix must be lower case.
func hasPrefixFold(s []byte, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// NormalizeTarget turns a request target into the page_views key, following
// the README's path normalisation rules. ok is false when the target is
// neither origin-form ("/...") nor an absolute http/https URL.
func NormalizeTarget(target []byte) (path string, ok bool) {
	p := target
	switch {
	case len(p) > 0 && p[0] == '/':
	case hasPrefixFold(p, "http://"):
		p = stripAuthority(p[len("http://"):])
	case hasPrefixFold(p, "https://"):
		p = stripAuthority(p[len("https://"):])
	default:
		return "", false
	}
	if k := bytes.IndexAny(p, "?#"); k >= 0 {
		p = p[:k]
	}
	out := make([]byte, 0, len(p)+1)
	for i, c := range p {
		if c == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		out = append(out, c)
	}
	if len(out) > 1 && out[len(out)-1] == '/' {
		out = out[:len(out)-1]
	}
	if len(out) == 0 {
		return "/", true
	}
	return string(out), true
}

// stripAuthority removes everything up to (not including) the first '/', '?'
// or '#'.
func stripAuthority(p []byte) []byte {
	if k := bytes.IndexAny(p, "/?#"); k >= 0 {
		return p[k:]
	}
	return nil
}

func parseStatus(s []byte) (int, bool) {
	if len(s) != 3 {
		return 0, false
	}
	n, ok := num(s)
	if !ok || n < 100 || n > 599 {
		return 0, false
	}
	return n, true
}

func parseBytes(s []byte) (int64, bool) {
	if len(s) == 1 && s[0] == '-' {
		return 0, true
	}
	if len(s) > MaxBytesDigits {
		return 0, false
	}
	return digits(s)
}
