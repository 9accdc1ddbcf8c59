package badgerq

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/flowrun/flowrun/internal/binenc"
	"github.com/flowrun/flowrun/queue"
)

// A packed value holds the events of one producer transaction, partition and
// priority (up to chunkBytes; larger runs use several chunks):
//
//	version:1 | per event: flags:1 uvarint(len) payload
//	                        [uvarint(len) key] [varint(unix nanos) event time]
//	                        [varint(unix seconds) uvarint(nanos) event time
//	                         outside int64 nanoseconds] [uvarint(len) trace id]
//
// The count, size and enqueue time live in the key (see keys.go).
const (
	valueVersion = 1
	flagKey      = 1 << 0
	flagTime     = 1 << 1
	flagTrace    = 1 << 2
	// flagWideTime: the event time as varint(unix seconds) uvarint(nanos),
	// for times int64 nanoseconds cannot hold (before 1678, after 2262),
	// which came back as some other time.
	flagWideTime = 1 << 3
)

// errCorrupt wraps queue.ErrCorrupt: callers test for that.
var errCorrupt = fmt.Errorf("badgerq: corrupt value (%w)", queue.ErrCorrupt)

func appendEvent(dst []byte, ev *queue.Event) []byte {
	var flags byte
	if ev.Key != nil {
		flags |= flagKey
	}
	wide := false
	if !ev.EventTime.IsZero() {
		ns := ev.EventTime.UnixNano()
		if time.Unix(0, ns).Equal(ev.EventTime) {
			flags |= flagTime
		} else {
			flags |= flagWideTime
			wide = true
		}
	}
	if ev.TraceID != "" {
		flags |= flagTrace
	}
	dst = append(dst, flags)
	dst = binenc.AppendBytes(dst, ev.Payload)
	if flags&flagKey != 0 {
		dst = binenc.AppendBytes(dst, ev.Key)
	}
	if flags&flagTime != 0 {
		dst = binary.AppendVarint(dst, ev.EventTime.UnixNano())
	}
	if wide {
		dst = binary.AppendVarint(dst, ev.EventTime.Unix())
		dst = binary.AppendUvarint(dst, uint64(ev.EventTime.Nanosecond()))
	}
	if flags&flagTrace != 0 {
		dst = binenc.AppendString(dst, ev.TraceID)
	}
	return dst
}

// eventReader walks a packed value. Payloads and keys alias the value, which
// the caller owns (a copy out of Badger); skip only steps over an event, so
// it may walk Badger's own memory (see readRun).
type eventReader struct {
	b []byte
}

func newEventReader(v []byte) (eventReader, error) {
	if len(v) < 1 || v[0] != valueVersion {
		return eventReader{}, fmt.Errorf("%w: version", errCorrupt)
	}
	return eventReader{b: v[1:]}, nil
}

func (r *eventReader) bytes() ([]byte, error) {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || uint64(len(r.b)-k) < n {
		return nil, errCorrupt
	}
	out := r.b[k : k+int(n) : k+int(n)]
	r.b = r.b[k+int(n):]
	return out, nil
}

// skip steps over one event without decoding it.
func (r *eventReader) skip() error { return r.walk(nil) }

// next decodes one event into ev.
func (r *eventReader) next(ev *queue.Event) error { return r.walk(ev) }

// walk steps over one event, the one walk of the format for skip and next;
// with ev non-nil it also sets *ev (payload and key alias the value).
func (r *eventReader) walk(ev *queue.Event) error {
	if len(r.b) < 1 {
		return errCorrupt
	}
	flags := r.b[0]
	r.b = r.b[1:]
	payload, err := r.bytes()
	if err != nil {
		return err
	}
	var key, trace []byte
	var ns int64
	if flags&flagKey != 0 {
		if key, err = r.bytes(); err != nil {
			return err
		}
	}
	if flags&flagTime != 0 {
		var k int
		if ns, k = binary.Varint(r.b); k <= 0 {
			return errCorrupt
		}
		r.b = r.b[k:]
	}
	var wideSec int64
	var wideNs uint64
	if flags&flagWideTime != 0 {
		var k int
		if wideSec, k = binary.Varint(r.b); k <= 0 {
			return errCorrupt
		}
		r.b = r.b[k:]
		if wideNs, k = binary.Uvarint(r.b); k <= 0 || wideNs >= 1e9 {
			return errCorrupt
		}
		r.b = r.b[k:]
	}
	if flags&flagTrace != 0 {
		if trace, err = r.bytes(); err != nil {
			return err
		}
	}
	if ev == nil {
		return nil
	}
	*ev = queue.Event{Payload: payload, Key: key}
	if flags&flagTime != 0 {
		ev.EventTime = time.Unix(0, ns)
	}
	if flags&flagWideTime != 0 {
		ev.EventTime = time.Unix(wideSec, int64(wideNs))
	}
	if len(trace) > 0 {
		ev.TraceID = string(trace)
	}
	return nil
}

// position is a place in one priority level of a partition: the next event
// to look at is event idx of chunk chunk of the entries written by wp.
type position struct {
	wp    uint64
	chunk uint32
	idx   uint32
}

// comparePos orders positions, for slices.SortFunc.
func comparePos(a, b position) int {
	switch {
	case a.less(b):
		return -1
	case b.less(a):
		return 1
	}
	return 0
}

func (p position) less(q position) bool {
	if p.wp != q.wp {
		return p.wp < q.wp
	}
	if p.chunk != q.chunk {
		return p.chunk < q.chunk
	}
	return p.idx < q.idx
}

// levelState is a group's progress through one priority level of one
// partition. Every event before pos is consumed, except events of the
// producer pointers in holes: those were in progress when the scan passed
// them, so they may still commit (and land) behind pos. A hole's own
// position says how far its events were consumed (wp is the hole's pointer).
type levelState struct {
	prio  uint8
	pos   position
	holes []position // sorted by wp
}

// cursor is the pointer below which the level is fully consumed: what
// eviction may delete.
func (l *levelState) cursor() uint64 {
	c := l.pos.wp
	if len(l.holes) > 0 && l.holes[0].wp < c {
		c = l.holes[0].wp
	}
	return c
}

// partState is a group's durable progress through one partition.
type partState struct {
	consumed uint64 // events delivered by committed transactions
	expired  uint64 // events skipped for TTL
	levels   []levelState
}

func (s *partState) clone() partState {
	c := partState{consumed: s.consumed, expired: s.expired, levels: make([]levelState, len(s.levels))}
	for i, l := range s.levels {
		c.levels[i] = levelState{prio: l.prio, pos: l.pos, holes: append([]position(nil), l.holes...)}
	}
	return c
}

func (s *partState) level(prio uint8) *levelState {
	for i := range s.levels {
		if s.levels[i].prio == prio {
			return &s.levels[i]
		}
	}
	s.levels = append(s.levels, levelState{prio: prio})
	return &s.levels[len(s.levels)-1]
}

func (s *partState) find(prio uint8) *levelState {
	for i := range s.levels {
		if s.levels[i].prio == prio {
			return &s.levels[i]
		}
	}
	return nil
}

func appendPos(dst []byte, p position) []byte {
	dst = binary.AppendUvarint(dst, p.wp)
	dst = binary.AppendUvarint(dst, uint64(p.chunk))
	return binary.AppendUvarint(dst, uint64(p.idx))
}

func (s *partState) encode(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, s.consumed)
	dst = binary.AppendUvarint(dst, s.expired)
	dst = binary.AppendUvarint(dst, uint64(len(s.levels)))
	for _, l := range s.levels {
		dst = append(dst, l.prio)
		dst = appendPos(dst, l.pos)
		dst = binary.AppendUvarint(dst, uint64(len(l.holes)))
		for _, h := range l.holes {
			dst = appendPos(dst, h)
		}
	}
	return dst
}

type decoder struct{ binenc.Reader }

func (d *decoder) pos() position {
	return position{wp: d.Uvarint(), chunk: uint32(d.Uvarint()), idx: uint32(d.Uvarint())}
}

func decodePartState(b []byte) (partState, error) {
	d := decoder{binenc.NewReader(b, errCorrupt)}
	var s partState
	s.consumed = d.Uvarint()
	s.expired = d.Uvarint()
	n := d.Uvarint()
	if n > 256 {
		return s, errCorrupt
	}
	for i := uint64(0); i < n && d.Err() == nil; i++ {
		l := levelState{prio: d.Byte(), pos: d.pos()}
		nh := d.Uvarint()
		if nh > uint64(d.Len()) {
			return s, errCorrupt
		}
		for j := uint64(0); j < nh && d.Err() == nil; j++ {
			l.holes = append(l.holes, d.pos())
		}
		s.levels = append(s.levels, l)
	}
	return s, d.Err()
}

// A stored state value holds one or two versions, newest first, each tagged
// with the write pointer of the consumer transaction that wrote it:
//
//	version:1 | n:1 | n × (wp:8 uvarint(len) state)
//
// On the fast path only committed values ever land, so one version is
// written. On the general path Persist writes the new version next to the
// previous committed one; a reader takes the newest version visible to it, so
// a crash between Persist and Commit cannot move a cursor.
type stateVersion struct {
	wp uint64
	st partState
}

func encodeStateValue(vs ...stateVersion) []byte {
	b := []byte{valueVersion, byte(len(vs))}
	for _, v := range vs {
		b = binary.BigEndian.AppendUint64(b, v.wp)
		enc := v.st.encode(nil)
		b = binary.AppendUvarint(b, uint64(len(enc)))
		b = append(b, enc...)
	}
	return b
}

func decodeStateValue(b []byte) ([]stateVersion, error) {
	if len(b) < 2 || b[0] != valueVersion {
		return nil, errCorrupt
	}
	n := int(b[1])
	b = b[2:]
	out := make([]stateVersion, 0, n)
	for i := 0; i < n; i++ {
		if len(b) < 8 {
			return nil, errCorrupt
		}
		wp := binary.BigEndian.Uint64(b)
		b = b[8:]
		l, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < l {
			return nil, errCorrupt
		}
		st, err := decodePartState(b[k : k+int(l)])
		if err != nil {
			return nil, err
		}
		b = b[k+int(l):]
		out = append(out, stateVersion{wp: wp, st: st})
	}
	return out, nil
}
