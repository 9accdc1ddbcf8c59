package flowlets

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

func newParserCtx() *flowlettest.Context {
	return flowlettest.New("parser").
		WithOutputs(OutPages, OutVisitors, OutStatus, OutBytes).
		RequireKey(OutPages, KeyPath).
		RequireKey(OutVisitors, KeyIP)
}

func events(lines ...string) []flowlet.Event {
	evs := make([]flowlet.Event, len(lines))
	for i, l := range lines {
		evs[i] = flowlettest.Event(l)
		evs[i].ID = "e" + string(rune('0'+i))
	}
	return evs
}

// decoded returns output's count records as value → count, checking that
// each event's partition key is the value's counter key.
func decoded(t *testing.T, c *flowlettest.Context, output, key string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, e := range c.Emitted() {
		if e.Output != output {
			continue
		}
		n, v, err := DecodeCount(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		ck, _ := CounterKey(v)
		if k, _ := e.Key(key); k != string(ck) {
			t.Errorf("%s: event for %.20q has key %s=%.20q, want %.20q", output, v, key, k, ck)
		}
		out[string(v)] += n
	}
	return out
}

func TestParserBatch(t *testing.T) {
	c := newParserCtx()
	p := &Parser{}
	if err := c.Init(p, nil); err != nil {
		t.Fatal(err)
	}
	evs := events(
		line("10.0.0.1", "21/Nov/2026:13:59:59 +0000", "GET /a/?x HTTP/1.1", "200", "100"),
		line("10.0.0.2", "21/Nov/2026:14:00:00 +0000", "GET http://h/a HTTP/1.1", "404", "-"),
		line("10.0.0.1", "21/Nov/2026:14:30:00 +0000", "POST /b HTTP/2", "200", "7"),
		line("10.0.0.1", "21/Nov/2026:13:59:00 +0000", "GET //a// HTTP/1.1", "304", "0"),
	)
	if err := c.Process(p, evs...); err != nil {
		t.Fatal(err)
	}
	if got := decoded(t, c, OutPages, KeyPath); !eq(got, map[string]int64{"/a": 3, "/b": 1}) {
		t.Errorf("pages %v", got)
	}
	if got := decoded(t, c, OutVisitors, KeyIP); !eq(got, map[string]int64{"10.0.0.1": 3, "10.0.0.2": 1}) {
		t.Errorf("visitors %v", got)
	}
	if got := decoded(t, c, OutStatus, KeyStatus); !eq(got, map[string]int64{"200": 2, "404": 1, "304": 1}) {
		t.Errorf("status %v", got)
	}
	// One event per distinct value, not per line.
	if n := len(c.Emits(OutPages)); n != 2 {
		t.Errorf("%d page events, want 2 (summed per step)", n)
	}
	hours := map[string][2]int64{}
	for _, e := range c.Emitted() {
		if e.Output != OutBytes {
			continue
		}
		lines, n, h, err := DecodeHour(e.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if k, _ := e.Key(KeyHour); k != string(h) {
			t.Errorf("hour event key %q for %q", k, h)
		}
		s := hours[string(h)]
		hours[string(h)] = [2]int64{s[0] + lines, s[1] + n}
	}
	if want := map[string][2]int64{"2026-11-21T13": {2, 100}, "2026-11-21T14": {2, 7}}; len(hours) != 2 ||
		hours["2026-11-21T13"] != want["2026-11-21T13"] || hours["2026-11-21T14"] != want["2026-11-21T14"] {
		t.Errorf("hours %v", hours)
	}
}

func eq(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// withoutDeadLetters runs one step of p on a context that cannot
// dead-letter (flowlettest's can: this hides it), as on a runtime without
// that extension: malformed lines fail the step.
func withoutDeadLetters(c *flowlettest.Context, p *Parser, evs ...flowlet.Event) error {
	err := p.ProcessBatch(struct{ flowlet.Context }{c}, evs)
	if err != nil {
		c.Abort()
	} else {
		c.Commit()
	}
	return err
}

func TestParserMalformedFailsStep(t *testing.T) {
	c := newParserCtx()
	p := &Parser{}
	good := okLine()
	// One malformed line: the whole step aborts, nothing is emitted.
	err := withoutDeadLetters(c, p, events(good, "garbage", good)...)
	var m *MalformedError
	if !errors.As(err, &m) || m.Index != 1 || m.Reason != ReasonFields || m.ID != "e1" || !m.Permanent() {
		t.Fatalf("err = %#v", err)
	}
	if !strings.Contains(err.Error(), `"garbage"`) || !IsMalformed(err) {
		t.Errorf("message %q", err)
	}
	if len(c.Emitted()) != 0 {
		t.Fatalf("failed step emitted %v", c.Emitted())
	}
	// Several: all are reported, in order.
	err = withoutDeadLetters(c, p, events("", good, "\r", strings.Repeat("x", 70000))...)
	var ml *MalformedLinesError
	if !errors.As(err, &ml) || len(ml.Lines) != 3 || !ml.Permanent() {
		t.Fatalf("err = %v", err)
	}
	var idx []int
	var reasons []Reason
	for _, l := range ml.Lines {
		idx, reasons = append(idx, l.Index), append(reasons, l.Reason)
	}
	if idx[0] != 0 || idx[1] != 2 || idx[2] != 3 || reasons[0] != ReasonEmpty || reasons[1] != ReasonEmpty || reasons[2] != ReasonTooLong {
		t.Errorf("indexes %v reasons %v", idx, reasons)
	}
	if !errors.As(err, &m) || m.Index != 0 {
		t.Errorf("errors.As first = %v", m)
	}
	if !strings.Contains(ml.Lines[2].Error(), "(70000 bytes)") || len(ml.Lines[2].Excerpt) != 200 {
		t.Errorf("long excerpt: %v", ml.Lines[2])
	}
	if len(c.Emitted()) != 0 {
		t.Fatal("failed step emitted")
	}
	// A one-line step (how a runtime isolates the bad line) works alike.
	if err := c.Process(p, events(good)...); err != nil {
		t.Fatal(err)
	}
	if err := p.Process(struct{ flowlet.Context }{c}, flowlettest.Event("bad")); !IsMalformed(err) {
		t.Fatalf("Process: %v", err)
	}
	c.Abort()
	if got := decoded(t, c, OutPages, KeyPath); !eq(got, map[string]int64{"/docs/index.html": 1}) {
		t.Errorf("pages %v", got)
	}
}

func TestParserRejectsConfig(t *testing.T) {
	if err := newParserCtx().Init(&Parser{}, map[string]any{"strict": true}); err == nil {
		t.Fatal("unknown config accepted")
	}
}

func TestLongKeys(t *testing.T) {
	long := "/" + strings.Repeat("p", 5000)
	host := strings.Repeat("h", 6000)
	c := newParserCtx()
	p := &Parser{}
	ln := line(host, okTime, "GET "+long+"/?q HTTP/1.1", "200", "1")
	if err := c.Process(p, events(ln, ln)...); err != nil {
		t.Fatal(err)
	}
	if got := decoded(t, c, OutPages, KeyPath); got[long] != 2 {
		t.Fatalf("pages %v", len(got))
	}
	for _, tc := range []struct {
		out, table string
		value      string
	}{{OutPages, ViewsCounters, long}, {OutVisitors, HitsCounters, host}} {
		cc := flowlettest.New("counter")
		ctr := &Counter{Table: tc.table}
		for _, e := range c.Emitted() {
			if e.Output == tc.out {
				if err := cc.Process(ctr, flowlet.Event{Payload: e.Payload}); err != nil {
					t.Fatal(err)
				}
			}
		}
		ck, isLong := CounterKey([]byte(tc.value))
		if !isLong || len(ck) > flowlet.MaxKeySize || !IsLongKey(ck) {
			t.Fatalf("counter key %q", ck)
		}
		if n := cc.Count(tc.table, string(ck)); n != 2 {
			t.Errorf("%s: count %d", tc.table, n)
		}
		if v, ok := cc.Get(LongKeysTable, string(ck)); !ok || v != tc.value {
			t.Errorf("%s: long key value missing", tc.table)
		}
	}
	// A key of exactly MaxKeySize bytes is its own key.
	v := []byte("/" + strings.Repeat("a", flowlet.MaxKeySize-1))
	if k, l := CounterKey(v); l || string(k) != string(v) || IsLongKey(k) {
		t.Error("MaxKeySize value")
	}
}

func TestCounter(t *testing.T) {
	c := flowlettest.New("page_views")
	ctr := &Counter{Table: ViewsCounters}
	if err := c.Init(ctr, nil); err != nil {
		t.Fatal(err)
	}
	evs := []flowlet.Event{
		{Payload: AppendCount(nil, 3, "/a")},
		{Payload: AppendCount(nil, 1, "/b")},
		{Payload: AppendCount(nil, 2, "/a")},
	}
	if err := c.Process(ctr, evs...); err != nil {
		t.Fatal(err)
	}
	if got := c.CountersMap(ViewsCounters); !eq(got, map[string]int64{"/a": 5, "/b": 1}) {
		t.Errorf("views %v", got)
	}
	// A record that is not ours fails the step and changes nothing.
	for _, bad := range [][]byte{nil, []byte("/a"), {recordV1}, {recordV1, 0, '/'}, {2, 1, '/'}} {
		if err := c.Process(ctr, flowlet.Event{Payload: AppendCount(nil, 1, "/c")}, flowlet.Event{Payload: bad}); err == nil {
			t.Errorf("record %q accepted", bad)
		}
	}
	if got := c.CountersMap(ViewsCounters); !eq(got, map[string]int64{"/a": 5, "/b": 1}) {
		t.Errorf("after failed steps %v", got)
	}
}

func TestRecords(t *testing.T) {
	rec := AppendHour(nil, 3, 1<<40, []byte("2026-11-21T13"))
	l, n, h, err := DecodeHour(rec)
	if err != nil || l != 3 || n != 1<<40 || string(h) != "2026-11-21T13" {
		t.Fatalf("%d %d %q %v", l, n, h, err)
	}
	for _, bad := range [][]byte{nil, rec[:len(rec)-1], append(rec[:len(rec):len(rec)], 'x'), {recordV1, 0, 0}, {0x02}} {
		if _, _, _, err := DecodeHour(bad); err == nil {
			t.Errorf("DecodeHour(%q) ok", bad)
		}
	}
	c, v, err := DecodeCount(AppendCount(nil, 300, "200"))
	if err != nil || c != 300 || string(v) != "200" {
		t.Fatal(c, v, err)
	}
}

// hourClock is a settable clock.
type hourClock struct{ t time.Time }

func (c *hourClock) now() time.Time { return c.t }

func hourEv(hour string, lines, n int64) flowlet.Event {
	return flowlet.Event{Payload: AppendHour(nil, lines, n, []byte(hour))}
}

func TestBytesPerHour(t *testing.T) {
	clk := &hourClock{time.Unix(1000, 0)}
	b := &BytesPerHour{now: clk.now}
	c := flowlettest.New("bytes_per_hour").WithOutputs(OutHours)
	if err := c.Init(b, map[string]any{"grace": "5s"}); err != nil {
		t.Fatal(err)
	}
	step := func(evs ...flowlet.Event) {
		t.Helper()
		if err := c.Process(b, evs...); err != nil {
			t.Fatal(err)
		}
	}
	tick := func(want ...string) {
		t.Helper()
		c.Reset()
		if err := c.Tick(b); err != nil {
			t.Fatal(err)
		}
		if got := c.Emits(OutHours); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("at %v flushed %q, want %q", clk.t.Unix(), got, want)
		}
	}
	const h13, h14, h15 = "2026-11-21T13", "2026-11-21T14", "2026-11-21T15"

	step(hourEv(h13, 2, 100), hourEv(h13, 1, 0))
	tick() // 13 is the latest hour: open
	clk.t = clk.t.Add(time.Hour)
	tick() // however long: no later hour seen

	step(hourEv(h14, 1, 0), hourEv(h13, 1, 5)) // 14 arrives: 13 is closed, quiet from now
	clk.t = clk.t.Add(4 * time.Second)
	tick()
	clk.t = clk.t.Add(time.Second)
	tick(`{"hour":"2026-11-21T13","bytes":105,"lines":4}`)
	tick() // flushed once

	// A late line reopens 13; it is flushed again once quiet, with the new
	// totals.
	step(hourEv(h13, 1, 10))
	tick()
	clk.t = clk.t.Add(3 * time.Second)
	step(hourEv(h13, 1, 10)) // activity restarts the quiet time
	clk.t = clk.t.Add(3 * time.Second)
	tick()
	clk.t = clk.t.Add(2 * time.Second)
	tick(`{"hour":"2026-11-21T13","bytes":125,"lines":6}`)

	// A later hour restarts the quiet time of the hours it closes; an hour
	// with 0 bytes is still an hour.
	clk.t = clk.t.Add(time.Minute)
	step(hourEv(h15, 1, 1))
	tick()
	clk.t = clk.t.Add(5 * time.Second)
	tick(`{"hour":"2026-11-21T14","bytes":0,"lines":1}`)

	if got := c.CountersMap(LinesCounters); !eq(got, map[string]int64{h13: 6, h14: 1, h15: 1}) {
		t.Errorf("lines %v", got)
	}
	if got := c.CountersMap(BytesCounters); got[h13] != 125 || got[h14] != 0 || got[h15] != 1 {
		t.Errorf("bytes %v", got)
	}
	if got := c.Table(MetaTable); got["max/0"] != h15 {
		t.Errorf("meta %v", got)
	}
	if got := c.Table(OpenTable); len(got) != 1 || got["0/"+h15] == "" {
		t.Errorf("open %v", got)
	}
}

func TestBytesPerHourAbortAndInstances(t *testing.T) {
	clk := &hourClock{time.Unix(1000, 0)}
	b := &BytesPerHour{now: clk.now}
	c := flowlettest.New("bytes_per_hour").WithInstance(1, 2)
	if err := c.Init(b, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Process(b, hourEv("2026-11-21T13", 1, 1), hourEv("2026-11-21T14", 1, 1)); err != nil {
		t.Fatal(err)
	}
	// A bad record aborts the step: neither counters nor open hours move.
	if err := c.Process(b, hourEv("2026-11-21T15", 1, 1), flowlet.Event{Payload: []byte("x")}); err == nil {
		t.Fatal("bad record accepted")
	}
	if got := c.Table(MetaTable); len(got) != 1 || got["max/1"] != "2026-11-21T14" {
		t.Errorf("meta %v", got)
	}
	open := c.Table(OpenTable)
	if len(open) != 2 || open["1/2026-11-21T13"] != "1000000000000" || open["1/2026-11-21T14"] != "1000000000000" {
		t.Errorf("open %v", open)
	}
	// The default grace is 2s.
	clk.t = clk.t.Add(DefaultGrace - 1)
	if c.Tick(b); len(c.Emits(OutHours)) != 0 {
		t.Fatal("flushed early")
	}
	clk.t = clk.t.Add(1)
	if c.Tick(b); len(c.Emits(OutHours)) != 1 {
		t.Fatal("not flushed")
	}
	for _, cfg := range []map[string]any{{"grace": "-1s"}, {"grace": 3}, {"graze": "1s"}} {
		if err := c.Init(&BytesPerHour{}, cfg); err == nil {
			t.Errorf("config %v accepted", cfg)
		}
	}
}

func TestRegistered(t *testing.T) {
	for _, name := range []string{TypeParser, TypePageViews, TypeUniqueVisitors, TypeStatusCounts, TypeBytesPerHour} {
		typ, ok := flowlet.Lookup(name)
		if !ok {
			t.Fatalf("%s not registered", name)
		}
		if err := flowlet.Check(typ.New(), typ.Info); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestParserDeadLettersItself(t *testing.T) {
	c := newParserCtx()
	p := &Parser{}
	good := okLine()
	evs := events(good, "garbage", good, "", good+"\r\r")
	if err := c.Process(p, evs...); err != nil {
		t.Fatal(err)
	}
	var dead []string
	for _, d := range c.DeadLetters() {
		if d.Event == nil {
			t.Errorf("dead letter %q without its event (DeadLetterEvent keeps it replayable)", d.Payload)
			continue
		}
		dead = append(dead, d.Event.ID+" "+string(d.Payload)+" | "+d.Reason)
	}
	want := []string{evs[1].ID + " garbage | weblog: malformed line (fields)", evs[3].ID + "  | weblog: malformed line (empty)", evs[4].ID + " " + good + "\r\r | weblog: malformed line (fields)"}
	if strings.Join(dead, "\n") != strings.Join(want, "\n") {
		t.Errorf("dead letters:\n%s", strings.Join(dead, "\n"))
	}
	// The good lines of the same batch count.
	if got := decoded(t, c, OutPages, KeyPath); !eq(got, map[string]int64{"/docs/index.html": 2}) {
		t.Errorf("pages %v", got)
	}
	if got := decoded(t, c, OutStatus, KeyStatus); !eq(got, map[string]int64{"200": 2}) {
		t.Errorf("status %v", got)
	}
}
