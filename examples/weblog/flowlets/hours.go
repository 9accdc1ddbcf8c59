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
	OpenTable     = "open"  // "<instance>/<hour>" → last activity (unix ns, decimal)
	MetaTable     = "meta"  // "max/<instance>" → latest hour the instance has seen

	OutHours = "hours"
)

// DefaultGrace is how long a closed hour must be quiet before a tick
// flushes it.
const DefaultGrace = 2 * time.Second

// BytesPerHour is the weblog_bytes_per_hour flowlet. Each hour record adds
// its bytes and lines to the counters of its hour; the counters are the
// result (bytes_per_hour of the results JSON). Lines are counted apart from
// bytes because an hour whose bytes sum to 0 still exists, and a counter
// that only ever had 0 added has no key.
//
// Closed hours are also flushed to the output "hours", one JSON object per
// hour: {"hour":"2026-11-21T13","bytes":4567,"lines":89}. An hour is closed
// once this instance has seen a later hour (in UTC); a tick (`tick:` in the
// app YAML) flushes a closed hour once it has been quiet for the grace
// period (config `grace`, default 2s of wall-clock time): no line of the hour
// arrived, and no later hour was first seen, for that long. The grace
// absorbs lines that arrive late or out of order: through the other parser
// instance, or from a backlog that the queue's partitions deliver in an
// order that is not the file's. A line that comes after its hour was
// flushed reopens the hour, and it is flushed again, with its new totals,
// once quiet again: in the output, the last object of an hour supersedes the
// earlier ones. The latest hour is never flushed, since no later hour closes
// it; the counters always have it.
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

// CheckConfig implements flowlet.ConfigChecker: Init only reads the config.
func (b *BytesPerHour) CheckConfig(ic flowlet.InitContext) error { return b.Init(ic) }

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

// BorrowsBatch: ProcessBatch keeps nothing of its slice of events once it
// returned (runtime.BatchBorrower: the runtime may reuse the slice).
func (*BytesPerHour) BorrowsBatch() {}

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
	now := []byte(strconv.FormatInt(b.clock().UnixNano(), 10))
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
		// Open (or reopen) the hour; its quiet time starts now.
		if err := open.Put(openKey(inst, h), now); err != nil {
			return err
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
	// A later hour closes every open hour before it: their grace starts now.
	prefix := openKey(inst, nil)
	var closing [][]byte
	it := open.Scan(flowlet.ScanOptions{Prefix: prefix})
	for it.Next() {
		if string(it.Key()[len(prefix):]) < string(newest) && string(it.Value()) != string(now) {
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
		if err := open.Put(k, now); err != nil {
			return err
		}
	}
	return nil
}

// Tick flushes the closed hours that have been quiet for the grace period.
func (b *BytesPerHour) Tick(ctx flowlet.Context) error {
	now := b.clock().UnixNano()
	inst := ctx.Instance()
	latest, _, err := ctx.State(MetaTable).Get(maxKey(inst))
	if err != nil {
		return err
	}
	open := ctx.State(OpenTable)
	prefix := openKey(inst, nil)
	var due [][]byte
	it := open.Scan(flowlet.ScanOptions{Prefix: prefix})
	for it.Next() {
		if string(it.Key()[len(prefix):]) >= string(latest) {
			continue // the latest hour: not closed
		}
		at, err := strconv.ParseInt(string(it.Value()), 10, 64)
		if err != nil {
			it.Close()
			return fmt.Errorf("weblog: bad open-hour entry %q: %v", it.Key(), err)
		}
		if now-at >= int64(b.grace) {
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
