package runtime

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/queue"
	_ "github.com/flowrun/flowrun/runtime/builtin"
	"github.com/flowrun/flowrun/tx"
)

// t_refuse_3 counts its events (counter n/ok) and fails the one whose
// payload ends in "3" with a permanent error.
type refuse3 struct{}

func (refuse3) Process(ctx flowlet.Context, ev flowlet.Event) error {
	if strings.HasSuffix(string(ev.Payload), "3") {
		return flowlet.Permanent(errors.New("refusing event 3"))
	}
	return ctx.Counters("n").Add([]byte("ok"), 1)
}

func init() {
	flowlet.Register("t_refuse_3", func() flowlet.Flowlet { return refuse3{} }, flowlet.TypeInfo{Sink: true})
}

const dlqBigPayload = 20000 // bytes of x before the sequence number

// runDLQApp runs until drained (or stopped) an app whose sink fails event 3
// of 0..5 (payloads of 20 KB) permanently, with commitFault set, and returns
// Run's error and the data directory.
func runDLQApp(t *testing.T, fault func(*stepCtx) error) (*App, string, error) {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	a := openYAML(t, fmt.Sprintf(`
app: dlqbig
flowlets:
  gen: {type: generator, config: {count: 6, batch: 6, payload: "%s{seq}"}}
  sink: {type: t_refuse_3, retries: {max: 2, backoff: 1ms}}
connections:
  - {from: gen, to: sink}
`, strings.Repeat("x", dlqBigPayload)), Options{DataDir: data, Drain: true})
	a.commitFault = fault
	// A hang detector, not a timing assertion: before the fix the sink
	// retried the dead-letter step forever.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := a.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("the app neither drained nor stopped: %+v", a.Status())
	}
	return a, data, err
}

// tooLargeDeadLetters refuses as too large every step of the sink that
// writes a dead letter of more than limit bytes of payload: the event's
// dead-letter record does not fit in one atomic write.
func tooLargeDeadLetters(limit int) func(*stepCtx) error {
	return func(sc *stepCtx) error {
		for _, d := range sc.dead {
			if len(d.Payload) > limit {
				return fmt.Errorf("refused by the test: %w", tx.ErrTooLarge)
			}
		}
		return nil
	}
}

// TestDeadLetterTooLarge: an event whose step is too large on its own is
// dead-lettered; when even its dead-letter record is too large, the record
// is truncated (metadata, error, the first bytes of the payload, flagged as
// truncated) and the partition flows on; a truncated record is not replayed.
func TestDeadLetterTooLarge(t *testing.T) {
	a, data, err := runDLQApp(t, tooLargeDeadLetters(truncatedPayloadBytes))
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	ok := countOf(t, a, "sink", "n", "ok")
	st := a.Status()
	a.Close()
	if ok != 5 {
		t.Errorf("sink counted %d events, want the 5 good ones", ok)
	}
	for _, f := range st.Flowlets {
		if f.Name == "sink" && (f.Processed != 6 || f.DeadLettered != 1 || f.TooLarge == 0) {
			t.Errorf("sink: processed %d (want 6), dead %d (want 1), too_large %d (want > 0)", f.Processed, f.DeadLettered, f.TooLarge)
		}
	}
	s, err := OpenStore(data)
	if err != nil {
		t.Fatal(err)
	}
	var dl []DeadLetter
	if err := s.DeadLetters("sink", 0, func(d DeadLetter) bool { dl = append(dl, d); return true }); err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("x", truncatedPayloadBytes)
	if len(dl) != 1 || !dl[0].Truncated || dl[0].PayloadBytes != dlqBigPayload+1 || string(dl[0].Payload) != want ||
		dl[0].EventID == "" || dl[0].Input != "gen.out" || !strings.Contains(dl[0].Error, "refusing event 3") ||
		!strings.Contains(dl[0].Error, "truncated") {
		for _, d := range dl {
			t.Logf("dead letter: %+v (payload %d bytes)", d, len(d.Payload))
		}
		t.Fatalf("%d dead letters; want one truncated record of event 3 (first %d of %d bytes)", len(dl), truncatedPayloadBytes, dlqBigPayload+1)
	}
	r, k, err := s.ReplayDeadLetters("sink", map[string]string{"gen.out": ""})
	s.Close()
	if err != nil || r != 0 || k != 1 {
		t.Errorf("replay: %d replayed, %d kept (%v); want the truncated record kept", r, k, err)
	}
}

// TestDeadLetterTooLargeEvenTruncated: when even the truncated record is
// too large, the instance stops, and the app with it, with an error that
// says so; nothing of the event's step was written.
func TestDeadLetterTooLargeEvenTruncated(t *testing.T) {
	a, data, err := runDLQApp(t, tooLargeDeadLetters(-1))
	a.Close()
	if err == nil || !strings.Contains(err.Error(), "cannot be dead-lettered") || !errors.Is(err, tx.ErrTooLarge) {
		t.Fatalf("run: %v; want the instance stopped on a dead letter too large even truncated", err)
	}
	s, oerr := OpenStore(data)
	if oerr != nil {
		t.Fatal(oerr)
	}
	defer s.Close()
	n := 0
	if err := s.DeadLetters("sink", 0, func(DeadLetter) bool { n++; return true }); err != nil || n != 0 {
		t.Fatalf("%d dead letters (%v), want none", n, err)
	}
}

// A truncated record survives encoding; an untruncated one is version 1.
func TestDeadLetterRecordTruncated(t *testing.T) {
	d := DeadLetter{Input: "a.out", EventID: "1", Error: "e", Attempts: 2, Time: time.Unix(5, 0), Payload: []byte("abc"), Truncated: true, PayloadBytes: 9}
	got, err := decodeDeadLetter("f", encodeDeadLetter(&d))
	if err != nil || !got.Truncated || got.PayloadBytes != 9 || string(got.Payload) != "abc" || got.EventID != "1" {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	d.Truncated, d.PayloadBytes = false, 0
	b := encodeDeadLetter(&d)
	if got, err := decodeDeadLetter("f", b); b[0] != dlqVersion || err != nil || got.Truncated || string(got.Payload) != "abc" {
		t.Fatalf("version %d, decoded %+v, %v", b[0], got, err)
	}
}

// A dead letter keeps its event's time whatever it is: the record wrote it
// as UnixNano, so a time outside 1678–2262 came back as another (3000 as
// 1830) and the Unix epoch as no time at all, where the queues keep both
// (a replayed event went back in with the wrong time). Records of times
// UnixNano holds stay version 1, byte for byte.
func TestDeadLetterEventTimeKept(t *testing.T) {
	for _, et := range []time.Time{
		{},
		time.Unix(0, 0),
		time.Unix(1, 0),
		time.Unix(-1, 5),
		time.Date(2026, 11, 22, 10, 0, 0, 123, time.UTC),
		time.Date(3000, 1, 2, 3, 4, 5, 6, time.UTC),
		time.Date(1500, 1, 2, 3, 4, 5, 6, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
	} {
		for _, trunc := range []bool{false, true} {
			d := DeadLetter{Input: "a.out", EventID: "1", Error: "e", Attempts: 2, Time: time.Unix(5, 0), EventTime: et, TraceID: "t", Payload: []byte("abc"), Truncated: trunc}
			if trunc {
				d.PayloadBytes = 9
			}
			b := encodeDeadLetter(&d)
			got, err := decodeDeadLetter("f", b)
			if err != nil || !got.EventTime.Equal(et) || got.EventTime.IsZero() != et.IsZero() || got.Truncated != trunc || string(got.Payload) != "abc" || got.TraceID != "t" {
				t.Errorf("event time %v, truncated %v: decoded %v (%+v), %v", et, trunc, got.EventTime, got, err)
			}
			ns := et.UnixNano()
			narrow := et.IsZero() || (ns != 0 && time.Unix(0, ns).Equal(et))
			if !trunc && narrow && b[0] != dlqVersion {
				t.Errorf("event time %v: version %d, want %d", et, b[0], dlqVersion)
			}
			// A version the binaries before the wide time do not know: they
			// read a version 2 record's time fields as the payload's first
			// bytes (a replay handed the flowlet a corrupt payload), and
			// refuse a version they do not know.
			if !narrow && (b[0] == dlqVersion || b[0] == dlqVersionTrunc) {
				t.Errorf("event time %v, truncated %v: version %d, which older binaries misread", et, trunc, b[0])
			}
		}
	}
}

// Records the version before the wide event time wrote (a dead letter
// with keys, one without an event time, a truncated one) decode as they
// did, and a record of the same dead letter is still the same bytes: a
// store's dead letters outlive the binary that wrote them. So do the
// wide-time records 20b53a3 wrote as version 2.
func TestDeadLetterRecordsOfTheLastVersion(t *testing.T) {
	at := time.Unix(1700000000, 5)
	for _, c := range []struct {
		hex  string
		want DeadLetter
		wide bool // written by 20b53a3 as version 2 with its wide-time flag: read, not written so any more
	}{
		{"010767656e2e6f757409332f302f372e302e3104626f6f6d038a80d0e2c6bfce972f8e80808abbe1abb42c02747201016b01767061796c6f6164",
			DeadLetter{Input: "gen.out", EventID: "3/0/7.0.1", Error: "boom", Attempts: 3, Time: at, EventTime: time.Unix(1600000000, 7), TraceID: "tr", Keys: []flowlet.KeyValue{{Name: "k", Value: "v"}}, Payload: []byte("payload")}, false},
		{"010767656e2e6f757409332f302f372e302e3204626f6f6d018a80d0e2c6bfce972f0000007032",
			DeadLetter{Input: "gen.out", EventID: "3/0/7.0.2", Error: "boom", Attempts: 1, Time: at, Payload: []byte("p2")}, false},
		{"020767656e2e6f757409332f302f372e302e3309746f6f206c61726765018a80d0e2c6bfce972f8e80808abbe1abb42c00000180897a616263",
			DeadLetter{Input: "gen.out", EventID: "3/0/7.0.3", Error: "too large", Attempts: 1, Time: at, EventTime: time.Unix(1600000000, 7), Payload: []byte("abc"), Truncated: true, PayloadBytes: 2000000}, false},
		{"020767656e2e6f757409332f302f372e302e3404626f6f6d018a80d0e2c6bfce972f0000000200caa28296f201067034",
			DeadLetter{Input: "gen.out", EventID: "3/0/7.0.4", Error: "boom", Attempts: 1, Time: at, EventTime: time.Date(3000, 1, 2, 3, 4, 5, 6, time.UTC), Payload: []byte("p4")}, true},
		{"020767656e2e6f757409332f302f372e302e3509746f6f206c61726765018a80d0e2c6bfce972f0000000380897a0000616263",
			DeadLetter{Input: "gen.out", EventID: "3/0/7.0.5", Error: "too large", Attempts: 1, Time: at, EventTime: time.Unix(0, 0), Payload: []byte("abc"), Truncated: true, PayloadBytes: 2000000}, true},
	} {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeDeadLetter("f", b)
		w := c.want
		w.Flowlet = "f"
		if err != nil || !got.Time.Equal(w.Time) || !got.EventTime.Equal(w.EventTime) || got.EventTime.IsZero() != w.EventTime.IsZero() {
			t.Errorf("%s: decoded %+v, %v; want %+v", w.EventID, got, err, w)
			continue
		}
		got.Time, got.EventTime, w.Time, w.EventTime = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", w) {
			t.Errorf("%s: decoded %+v, want %+v", w.EventID, got, w)
		}
		if again := encodeDeadLetter(&c.want); !c.wide && !bytes.Equal(again, b) {
			t.Errorf("%s: written now as %x, was %s", w.EventID, again, c.hex)
		}
	}
}

// FuzzDecodeDeadLetter: any record decodes or fails without a panic, and
// one that decodes is written back with the same event time, payload and
// truncation (go test runs the seeds; -fuzz explores).
func FuzzDecodeDeadLetter(f *testing.F) {
	for _, et := range []time.Time{{}, time.Unix(0, 0), time.Unix(1600000000, 7), time.Date(3000, 1, 2, 3, 4, 5, 6, time.UTC)} {
		for _, trunc := range []bool{false, true} {
			d := DeadLetter{Input: "a.out", EventID: "1", Error: "e", Attempts: 2, Time: time.Unix(5, 0), EventTime: et, TraceID: "t", Keys: []flowlet.KeyValue{{Name: "k", Value: "v"}}, Payload: []byte("abc"), Truncated: trunc, PayloadBytes: 9}
			f.Add(encodeDeadLetter(&d))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeDeadLetter("f", b)
		if err != nil {
			return
		}
		again, err := decodeDeadLetter("f", encodeDeadLetter(&d))
		if err != nil || !again.EventTime.Equal(d.EventTime) || again.EventTime.IsZero() != d.EventTime.IsZero() || !bytes.Equal(again.Payload, d.Payload) || again.Truncated != d.Truncated {
			t.Fatalf("%x decoded as %+v, written back and read as %+v, %v", b, d, again, err)
		}
	})
}

// A tail of a dead-letter queue shows each dead letter's event time and
// trace id, from its record: they were taken from the queue entry, which
// has none (the record carries them), so both were always empty.
func TestDeadLetterTailShowsEventHeaders(t *testing.T) {
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	qs := s.st.queues
	if err := qs.CreateQueue(DLQName("f"), queue.Config{}); err != nil {
		t.Fatal(err)
	}
	p, err := qs.Producer(DLQName("f"))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	d := DeadLetter{Input: "a.out", EventID: "1", Error: "e", Attempts: 1, Time: at, EventTime: at, TraceID: "t9", Payload: []byte("p")}
	txc := s.st.coord.NewContext(p)
	if _, err := txc.Start(time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := p.Enqueue(context.Background(), queue.Event{Payload: encodeDeadLetter(&d)}); err != nil {
		t.Fatal(err)
	}
	if err := txc.Finish(); err != nil {
		t.Fatal(err)
	}
	var got []QueueEntry
	if err := s.Scan(DLQName("f"), "", 0, func(e QueueEntry) bool { got = append(got, e); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].EventTime.Equal(at) || got[0].TraceID != "t9" || string(got[0].Payload) != "p" {
		t.Fatalf("tail of the DLQ: %+v", got)
	}
}
