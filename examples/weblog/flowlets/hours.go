package flowlets

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/flowrun/flowrun/flowlet"
)

// State of weblog_bytes_per_hour.
const (
	BytesCounters = "bytes" // hour → sum of BYTES
	LinesCounters = "lines" // hour → well-formed lines (an hour exists iff > 0)
	OpenTable     = "open"  // "<instance>/<hour>" → close time (unix ns), "0": not closed yet
	MetaTable     = "meta"  // "max/<instance>" → latest hour the instance has seen

	OutHours = "hours"
)

// DefaultGrace is how long an hour stays open after a later hour was first
// seen, before a tick flushes it.
const DefaultGrace = 2 * time.Second

// BytesPerHour is the weblog_bytes_per_hour flowlet. Each hour record adds
// its bytes and lines to the counters of its hour; the counters are the
// result (bytes_per_hour of the results JSON). Lines are counted apart from
// bytes because an hour whose bytes sum to 0 still exists, and a counter
// that only ever had 0 added has no key.
//
// Closed hours are also flushed to the output "hours", one JSON object per
// hour: {"hour":"2026-11-21T13","bytes":4567,"lines":89}. An hour is closed
// once this instance has seen a later hour (in UTC) and the grace period
// (config `grace`, default 2s of wall-clock time) has passed since it first
// did; the tick (`tick:` in the app YAML) flushes every closed hour that is
// still open. The grace absorbs lines of an hour that arrive slightly late,
// for example through the other parser instance. A line that comes after
// its hour was flushed reopens the hour, and the next flush after another
// grace writes the hour again with its new totals: in the output, the last
// object of an hour supersedes the earlier ones. The latest hour is never
// flushed, since no later hour closes it; the counters always have it.
//
// Open hours and the latest hour seen are kept per instance (keys start
// with the instance index), so instances never write the same state keys;
// with several instances an hour may be flushed by each instance that saw
// it, each time with the totals committed so far.
type BytesPerHour struct {
	grace time.Duration
	now   func() time.Time

	sums []hourSum
	buf  []byte
}

// Init reads `grace`.
func (b *BytesPerHour) Init(ic flowlet.InitContext) error {
	if err := ic.Config.Known("grace"); err != nil {
		return err
	}
	g, err := ic.Config.Duration("grace", DefaultGrace)
	if err != nil {
		return err
	}
	if g < 0 {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "grace", Msg: "must not be negative"}
	}
	b.grace = g
	if b.now == nil {
		b.now = time.Now
	}
	return nil
}

func (b *BytesPerHour) clock() time.Time {
	if b.now == nil {
		return time.Now()
	}
	return b.now()
}

func openKey(instance int, hour []byte) []byte {
	k := strconv.AppendInt(nil, int64(instance), 10)
	k = append(k, '/')
	return append(k, hour...)
}

func maxKey(instance int) []byte { return fmt.Appendf(nil, "max/%d", instance) }

// ProcessBatch adds the batch's hour records.
func (b *BytesPerHour) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	b.sums = b.sums[:0]
	for i := range evs {
		lines, n, hour, err := DecodeHour(evs[i].Payload)
		if err != nil {
			return err
		}
		j := slices.IndexFunc(b.sums, func(s hourSum) bool { return string(s.hour[:]) == string(hour) })
		if j < 0 {
			j = len(b.sums)
			b.sums = append(b.sums, hourSum{})
			copy(b.sums[j].hour[:], hour)
		}
		b.sums[j].lines += lines
		b.sums[j].bytes += n
	}
	if len(b.sums) == 0 {
		return nil
	}
	inst := ctx.Instance()
	meta, open := ctx.State(MetaTable), ctx.State(OpenTable)
	mk := maxKey(inst)
	latest, _, err := meta.Get(mk)
	if err != nil {
		return err
	}
	now := strconv.FormatInt(b.clock().UnixNano(), 10)
	newest := latest
	for i := range b.sums {
		s := &b.sums[i]
		h := s.hour[:]
		if err := ctx.Counters(BytesCounters).Add(h, s.bytes); err != nil {
			return err
		}
		if err := ctx.Counters(LinesCounters).Add(h, s.lines); err != nil {
			return err
		}
		ok := openKey(inst, h)
		_, isOpen, err := open.Get(ok)
		if err != nil {
			return err
		}
		if !isOpen {
			// New, or reopened by a late line: closed at once if a later
			// hour was already seen.
			closeAt := "0"
			if string(h) < string(latest) {
				closeAt = now
			}
			if err := open.Put(ok, []byte(closeAt)); err != nil {
				return err
			}
		}
		if string(h) > string(newest) {
			newest = slices.Clone(h)
		}
	}
	if string(newest) == string(latest) {
		return nil
	}
	if err := meta.Put(mk, newest); err != nil {
		return err
	}
	// Every open hour before the new latest one starts its grace now.
	prefix := openKey(inst, nil)
	var closing [][]byte
	it := open.Scan(flowlet.ScanOptions{Prefix: prefix})
	for it.Next() {
		if string(it.Value()) == "0" && string(it.Key()[len(prefix):]) < string(newest) {
			closing = append(closing, slices.Clone(it.Key()))
		}
	}
	if err := it.Err(); err != nil {
		it.Close()
		return err
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, k := range closing {
		if err := open.Put(k, []byte(now)); err != nil {
			return err
		}
	}
	return nil
}

// Tick flushes the hours whose grace has passed.
func (b *BytesPerHour) Tick(ctx flowlet.Context) error {
	now := b.clock().UnixNano()
	open := ctx.State(OpenTable)
	prefix := openKey(ctx.Instance(), nil)
	var due [][]byte
	it := open.Scan(flowlet.ScanOptions{Prefix: prefix})
	for it.Next() {
		at, err := strconv.ParseInt(string(it.Value()), 10, 64)
		if err != nil {
			it.Close()
			return fmt.Errorf("weblog: bad open-hour entry %q: %v", it.Key(), err)
		}
		if at != 0 && now-at >= int64(b.grace) {
			due = append(due, slices.Clone(it.Key()))
		}
	}
	if err := it.Err(); err != nil {
		it.Close()
		return err
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, k := range due {
		hour := k[len(prefix):]
		n, err := ctx.Counters(BytesCounters).Get(hour)
		if err != nil {
			return err
		}
		lines, err := ctx.Counters(LinesCounters).Get(hour)
		if err != nil {
			return err
		}
		b.buf = fmt.Appendf(b.buf[:0], `{"hour":%q,"bytes":%d,"lines":%d}`, hour, n, lines)
		if err := ctx.Emit(OutHours, b.buf); err != nil {
			return err
		}
		if err := open.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
