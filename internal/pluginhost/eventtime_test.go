package pluginhost_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
	"github.com/flowrun/flowrun/internal/pluginhost"
)

// TestEventTimeOutsideTheWire: the wire carries an event time as int64
// Unix nanoseconds, 0 for none, so an input event of 3000 reached the
// plugin as a time in 1831 and one at the Unix epoch with no event time,
// silently (queues keep both). The host refuses such a batch, as the SDK
// refuses such an emit: a permanent error naming the time, so that the
// runtime dead-letters that event at once and processes the others; the
// plugin is not called, nor restarted.
func TestEventTimeOutsideTheWire(t *testing.T) {
	f, ctx := startUpper(t)
	ok := time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC)
	if err := ctx.Process(f, flowlettest.Event("a", flowlet.EventTime(ok))); err != nil {
		t.Fatal(err)
	}
	if got := ctx.Emitted(); len(got) != 1 || !got[0].EventTime.Equal(ok) {
		t.Fatalf("emitted %+v, want one at %v", got, ok)
	}
	before := pid(f)
	for _, at := range []time.Time{
		time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(0, 0),
	} {
		n := len(ctx.Emitted())
		err := ctx.Process(f, ev("b"), flowlettest.Event("c", flowlet.EventTime(at)))
		if err == nil || !flowlet.IsPermanent(err) || !strings.Contains(err.Error(), fmt.Sprint(at)) {
			t.Errorf("event time %v: %v, want a permanent error naming it", at, err)
		}
		if got := ctx.Emitted(); len(got) != n {
			t.Errorf("event time %v: emitted %+v", at, got[n:])
		}
	}
	if after := pid(f); after != before {
		t.Errorf("the plugin was restarted (pid %d, then %d)", before, after)
	}
}

// TestEventTextNotUTF8: an input event's key names and values and its
// trace id are protobuf strings on the wire, which must be UTF-8; queues
// take any bytes (a key made from a binary id, say). Such an event made the
// request unsendable: the plugin process was killed and restarted at every
// attempt, and the whole batch failed each time. The host refuses it before
// the call, with a permanent error naming the event, as it does an event
// time the wire cannot carry: the runtime dead-letters that event alone.
func TestEventTextNotUTF8(t *testing.T) {
	f, ctx := startUpper(t)
	if err := ctx.Process(f, ev("a")); err != nil {
		t.Fatal(err)
	}
	before := pid(f)
	for name, opt := range map[string]flowlet.EmitOption{
		"key value": flowlet.Key("x", "\xff\xfe"),
		"key name":  flowlet.Key("\xff", "v"),
		"trace id":  flowlet.TraceID("t\xff"),
	} {
		n := len(ctx.Emitted())
		bad := flowlettest.Event("c", opt)
		bad.ID = "bad-1"
		err := ctx.Process(f, ev("b"), bad)
		if err == nil || !flowlet.IsPermanent(err) || !strings.Contains(err.Error(), `"bad-1"`) {
			t.Errorf("%s: %v, want a permanent error naming the event", name, err)
		}
		if got := ctx.Emitted(); len(got) != n {
			t.Errorf("%s: emitted %+v", name, got[n:])
		}
	}
	if after := pid(f); after != before {
		t.Errorf("the plugin was restarted (pid %d, then %d)", before, after)
	}
}

// startUpper starts an instance of the test plugin, closed with the test.
func startUpper(t *testing.T) (flowlet.Flowlet, *flowlettest.Context) {
	t.Helper()
	p := open(t, "upper", "testplugin", options(t, nil))
	f := p.Type().New()
	ctx := flowlettest.New("upper")
	if err := ctx.Init(f, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.(flowlet.Closer).Close() })
	return f, ctx
}

// TestUnsendableRequestNotCalledAnExit: a step whose request the host
// cannot send (one the plugin never got) ends with the host killing the
// live process; the error said "the plugin process exited", as for a
// crash, because the host looked for the exit only after its own kill.
func TestUnsendableRequestNotCalledAnExit(t *testing.T) {
	f, ctx := startUpper(t)
	if err := ctx.Process(f, ev("a")); err != nil {
		t.Fatal(err)
	}
	err := pluginhost.SendUnsendable(f, ctx)
	var ce *pluginhost.CallError
	if !errors.As(err, &ce) || ce.Timeout || strings.Contains(err.Error(), "exited") ||
		!strings.Contains(err.Error(), "the plugin was killed") || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("got %v, want a CallError naming the cause and saying the host killed the plugin", err)
	}
	if err := ctx.Process(f, ev("b")); err != nil {
		t.Fatal(err)
	}
}

// TestNotUTF8ReasonBounded: the error refusing an event whose key value or
// trace id is not UTF-8 quoted the whole text, four bytes for each bad one:
// a binary key of 64 KiB made a reason of 256 KiB, logged at each failure
// and stored in the dead-letter record beside the key itself (where a large
// one gets the record truncated, its payload cut). It quotes the start.
func TestNotUTF8ReasonBounded(t *testing.T) {
	f, ctx := startUpper(t)
	long := strings.Repeat("\xff", 64<<10)
	for name, opt := range map[string]flowlet.EmitOption{
		"key value": flowlet.Key("k", long),
		"key name":  flowlet.Key(long, "v"),
		"trace id":  flowlet.TraceID(long),
	} {
		err := ctx.Process(f, flowlettest.Event("c", opt))
		if err == nil || !flowlet.IsPermanent(err) || len(err.Error()) > 1024 ||
			!strings.Contains(err.Error(), "not UTF-8") || !strings.Contains(err.Error(), fmt.Sprint(len(long), " bytes")) {
			msg := fmt.Sprint(err)
			t.Errorf("%s: a permanent error of %d bytes: %.300s; want one under 1 KiB saying what is not UTF-8 and its size", name, len(msg), msg)
		}
	}
}
