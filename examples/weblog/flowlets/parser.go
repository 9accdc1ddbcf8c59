package flowlets

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flowrun/flowrun/flowlet"
)

// Parser outputs and the partition keys set on their events.
const (
	OutPages    = "pages"    // key KeyPath
	OutVisitors = "visitors" // key KeyIP
	OutStatus   = "status"   // key KeyStatus
	OutBytes    = "bytes"    // key KeyHour

	KeyPath   = "path"
	KeyIP     = "ip"
	KeyStatus = "status"
	KeyHour   = "hour"
)

// Parser is the weblog_parser flowlet: each input event is one log line (the
// line's bytes without its "\n"). A step parses its whole batch and emits,
// per distinct value in the batch, one count record on pages (normalised
// path), visitors (HOST) and status, and one hour record per UTC hour on
// bytes (see the record formats in record.go). Summing per step keeps the
// downstream queues small: a batch of 500 lines becomes a few hundred events
// instead of 2,000.
//
// A malformed line goes to the flowlet's dead-letter queue. When the step's
// Context can dead-letter an input itself (the runtime's, through the method
// DeadLetterEvent(ev flowlet.Event, reason string) error, or else
// DeadLetter(payload []byte, reason string) error), the parser does so in the
// step's transaction and the rest of the batch is processed as usual: a parse
// error is permanent, so retrying it would only cost time. Otherwise the step
// fails with a *MalformedError (several: a *MalformedLinesError, naming every
// bad event), nothing of the batch is emitted, and the runtime (the error
// is permanent) processes the batch event by event and dead-letters each
// malformed line at once, without retries.
type Parser struct {
	lp       LineParser
	pages    tally
	visitors tally
	status   tally
	hours    []hourSum
	buf      []byte
}

type hourSum struct {
	hour         [HourKeyLen]byte
	lines, bytes int64
}

// tally counts values in first-seen order (so emits are deterministic).
type tally struct {
	index map[string]int
	vals  []string
	n     []int64
}

func (t *tally) reset() {
	if t.index == nil {
		t.index = map[string]int{}
	}
	clear(t.index)
	t.vals, t.n = t.vals[:0], t.n[:0]
}

func (t *tally) add(v []byte) {
	if i, ok := t.index[string(v)]; ok {
		t.n[i]++
		return
	}
	s := string(v)
	t.index[s] = len(t.vals)
	t.vals = append(t.vals, s)
	t.n = append(t.n, 1)
}

// MalformedError is a malformed line (README §2). It is permanent: the same
// line fails the same way every time, so retrying it is pointless.
type MalformedError struct {
	// Index is the event's position in the step's batch, ID its event ID.
	Index  int
	ID     string
	Reason Reason
	// Excerpt is the start of the line, at most 200 bytes.
	Excerpt string
	Len     int
}

func (e *MalformedError) Error() string {
	more := ""
	if e.Len > len(e.Excerpt) {
		more = fmt.Sprintf("… (%d bytes)", e.Len)
	}
	return fmt.Sprintf("weblog: malformed line (%s): %q%s", e.Reason, e.Excerpt, more)
}

// Permanent reports that retrying cannot help.
func (e *MalformedError) Permanent() bool { return true }

// MalformedLinesError is returned when a batch holds several malformed
// lines; it unwraps to each one's *MalformedError.
type MalformedLinesError struct {
	Lines []*MalformedError
}

func (e *MalformedLinesError) Error() string {
	idx := make([]string, len(e.Lines))
	for i, l := range e.Lines {
		idx[i] = fmt.Sprint(l.Index)
	}
	return fmt.Sprintf("weblog: %d malformed lines in the batch (events %s); first: %v",
		len(e.Lines), strings.Join(idx, ", "), e.Lines[0])
}

// Unwrap returns the lines' errors.
func (e *MalformedLinesError) Unwrap() []error {
	out := make([]error, len(e.Lines))
	for i, l := range e.Lines {
		out[i] = l
	}
	return out
}

// Permanent reports that retrying cannot help.
func (e *MalformedLinesError) Permanent() bool { return true }

// eventDeadLetterer and deadLetterer are the runtime's optional Context
// methods that move an input to the flowlet's dead-letter queue in the
// step's transaction (matched structurally, as the runtime documents):
// DeadLetterEvent keeps the event's input queue and id, so `flowrun dlq
// replay` can replay it; DeadLetter keeps only the payload.
type eventDeadLetterer interface {
	DeadLetterEvent(ev flowlet.Event, reason string) error
}

type deadLetterer interface {
	DeadLetter(payload []byte, reason string) error
}

// Init rejects any config: the parsing rules are fixed.
func (p *Parser) Init(ic flowlet.InitContext) error { return ic.Config.Known() }

// CheckConfig implements flowlet.ConfigChecker: Init only reads the config.
func (p *Parser) CheckConfig(ic flowlet.InitContext) error { return p.Init(ic) }

// Process handles a one-event step.
func (p *Parser) Process(ctx flowlet.Context, ev flowlet.Event) error {
	return p.ProcessBatch(ctx, []flowlet.Event{ev})
}

// BorrowsBatch: ProcessBatch keeps nothing of its slice of events once it
// returned (runtime.BatchBorrower: the runtime may reuse the slice).
func (*Parser) BorrowsBatch() {}

// ProcessBatch parses the batch and emits its sums.
func (p *Parser) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	p.pages.reset()
	p.visitors.reset()
	p.status.reset()
	p.hours = p.hours[:0]
	var bad []*MalformedError
	dle, canDLE := ctx.(eventDeadLetterer)
	dl, canDL := ctx.(deadLetterer)
	for i := range evs {
		l, reason, ok := p.lp.Parse(evs[i].Payload)
		if !ok {
			var err error
			switch {
			case canDLE:
				err = dle.DeadLetterEvent(evs[i], "weblog: malformed line ("+reason.String()+")")
			case canDL:
				err = dl.DeadLetter(evs[i].Payload, "weblog: malformed line ("+reason.String()+")")
			default:
				bad = append(bad, malformed(i, &evs[i], reason))
				continue
			}
			if err != nil {
				return err
			}
			continue
		}
		if bad != nil {
			continue // the step fails anyway; just find the other bad lines
		}
		p.pages.add(l.Path)
		p.visitors.add(l.Host)
		p.status.add(l.Status[:])
		p.addHour(&l)
	}
	switch len(bad) {
	case 0:
	case 1:
		return bad[0]
	default:
		return &MalformedLinesError{Lines: bad}
	}
	if err := p.emitTally(ctx, &p.pages, OutPages, KeyPath); err != nil {
		return err
	}
	if err := p.emitTally(ctx, &p.visitors, OutVisitors, KeyIP); err != nil {
		return err
	}
	if err := p.emitTally(ctx, &p.status, OutStatus, KeyStatus); err != nil {
		return err
	}
	for i := range p.hours {
		h := &p.hours[i]
		p.buf = AppendHour(p.buf[:0], h.lines, h.bytes, h.hour[:])
		if err := ctx.Emit(OutBytes, p.buf, flowlet.Key(KeyHour, string(h.hour[:]))); err != nil {
			return err
		}
	}
	return nil
}

func (p *Parser) addHour(l *Line) {
	// Lines mostly come in time order: the hour is nearly always the last one.
	for i := len(p.hours) - 1; i >= 0; i-- {
		if p.hours[i].hour == l.Hour {
			p.hours[i].lines++
			p.hours[i].bytes += l.Bytes
			return
		}
	}
	p.hours = append(p.hours, hourSum{hour: l.Hour, lines: 1, bytes: l.Bytes})
}

func (p *Parser) emitTally(ctx flowlet.Context, t *tally, out, key string) error {
	for i, v := range t.vals {
		p.buf = AppendCount(p.buf[:0], t.n[i], v)
		k := v
		if len(v) > flowlet.MaxKeySize {
			ck, _ := CounterKey([]byte(v))
			k = string(ck)
		}
		if err := ctx.Emit(out, p.buf, flowlet.Key(key, k)); err != nil {
			return err
		}
	}
	return nil
}

func malformed(i int, ev *flowlet.Event, r Reason) *MalformedError {
	ex := ev.Payload
	if len(ex) > 200 {
		ex = ex[:200]
	}
	return &MalformedError{Index: i, ID: ev.ID, Reason: r, Excerpt: string(ex), Len: len(ev.Payload)}
}

// IsMalformed reports whether err is (or wraps) a malformed-line error.
func IsMalformed(err error) bool {
	var m *MalformedError
	return errors.As(err, &m)
}
