package flowlettest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

type kv struct{ fail bool }

func (k *kv) Process(ctx flowlet.Context, ev flowlet.Event) error {
	t := ctx.State("t")
	old, _, _ := t.Get(ev.Payload)
	t.Put(ev.Payload, append(old, 'x'))
	ctx.Counters("n").Add([]byte("all"), 1)
	if err := ctx.Emit("out", ev.Payload, flowlet.Key("k", string(ev.Payload))); err != nil {
		return err
	}
	if k.fail {
		return errors.New("boom")
	}
	return nil
}

type gen struct{ n int }

func (g *gen) Generate(ctx flowlet.Context) error {
	if g.n == 2 {
		return flowlet.ErrEndOfInput
	}
	g.n++
	return ctx.Emit("out", []byte(fmt.Sprint(g.n)))
}

func TestStepSemantics(t *testing.T) {
	c := New("kv").WithInstance(1, 3).RequireKey("out", "k").WithOutputs("out")
	f := &kv{}
	if err := c.Process(f, Event("a"), Event("b"), Event("a")); err != nil {
		t.Fatal(err)
	}
	f.fail = true
	if err := c.Process(f, Event("a"), Event("c")); err == nil {
		t.Fatal("failing step succeeded")
	}
	if v, _ := c.Get("t", "a"); v != "xx" {
		t.Fatalf("a = %q: an aborted step left a write", v)
	}
	if _, ok := c.Get("t", "c"); ok {
		t.Fatal("aborted put visible")
	}
	if n := c.Count("n", "all"); n != 3 {
		t.Fatalf("count %d", n)
	}
	if got := strings.Join(c.Emits("out"), ","); got != "a,b,a" {
		t.Fatalf("emits %s", got)
	}
	if k, _ := c.Emitted()[1].Key("k"); k != "b" {
		t.Fatalf("key %q", k)
	}
	if c.Instance() != 1 || c.Instances() != 3 || c.Name() != "kv" {
		t.Fatal("identity")
	}
	if err := c.Emit("out", nil); err == nil {
		t.Fatal("emit without the required key")
	}
	if err := c.Emit("other", nil, flowlet.Key("k", "v")); err == nil {
		t.Fatal("emit on an undeclared output")
	}
	c.Abort()

	// Scans merge pending writes, in order, with limits.
	tb := c.State("t")
	tb.Put([]byte("0"), []byte("z"))
	tb.Delete([]byte("b"))
	it := tb.Scan(flowlet.ScanOptions{Limit: 2})
	var keys []string
	for it.Next() {
		keys = append(keys, string(it.Key())+"="+string(it.Value()))
	}
	it.Close()
	if got := strings.Join(keys, " "); got != "0=z a=xx" {
		t.Fatalf("scan %s", got)
	}
	c.Commit()
	if got := c.Table("t"); len(got) != 2 || got["0"] != "z" {
		t.Fatalf("table %v", got)
	}

	g := &gen{}
	gc := New("gen")
	for {
		if err := gc.Generate(g); errors.Is(err, flowlet.ErrEndOfInput) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(gc.Emits("out"), ","); got != "1,2" {
		t.Fatalf("generated %s", got)
	}
	if err := gc.Tick(g); err == nil {
		t.Fatal("Tick on a flowlet without Tick")
	}
}

// careless ignores Emit's error; dead dead-letters what it cannot use.
type careless struct{}

func (careless) Process(ctx flowlet.Context, ev flowlet.Event) error {
	if err := ctx.State("t").Put([]byte("k"), ev.Payload); err != nil {
		return err
	}
	_ = ctx.Emit("out", ev.Payload) // no key: fails, ignored
	return nil
}

type dead struct{}

func (dead) Process(ctx flowlet.Context, ev flowlet.Event) error {
	dl := ctx.(interface {
		DeadLetterEvent(flowlet.Event, string) error
	})
	return dl.DeadLetterEvent(ev, "unusable")
}

// As in the runtime: an ignored failed Emit fails the step (no state write
// lands); events have IDs, kept when the same value is processed again; a
// step's own dead letters commit with it.
func TestRuntimeParity(t *testing.T) {
	ctx := New("c").RequireKey("out", "k")
	if err := ctx.Process(careless{}, Event("x")); err == nil || !strings.Contains(err.Error(), "without its partition key") {
		t.Fatalf("a step whose Emit failed: %v, want the emit error", err)
	}
	if _, ok := ctx.Get("t", "k"); ok {
		t.Error("the failed step's state write landed")
	}
	a, b := Event("a"), Event("b")
	if a.ID == "" || a.ID == b.ID {
		t.Errorf("event ids %q and %q: want distinct, non-empty", a.ID, b.ID)
	}
	if err := ctx.Process(dead{}, a); err != nil {
		t.Fatal(err)
	}
	dls := ctx.DeadLetters()
	if len(dls) != 1 || dls[0].Reason != "unusable" || dls[0].Event == nil || dls[0].Event.ID != a.ID || string(dls[0].Payload) != "a" {
		t.Fatalf("dead letters %+v", dls)
	}
}

// As in the runtime, an iterator's Key, Value and Count before the first
// Next are empty, not an index-out-of-range panic.
func TestIteratorBeforeNext(t *testing.T) {
	ctx := New("c")
	ctx.State("t").Put([]byte("k"), []byte("v"))
	ctx.Counters("n").Add([]byte("k"), 1)
	it, cit := ctx.State("t").Scan(flowlet.ScanOptions{}), ctx.Counters("n").Scan(flowlet.ScanOptions{})
	if it.Key() != nil || it.Value() != nil || cit.Key() != nil || cit.Count() != 0 {
		t.Fatal("an iterator before Next has a current entry")
	}
	if !it.Next() || string(it.Key()) != "k" || string(it.Value()) != "v" || !cit.Next() || cit.Count() != 1 {
		t.Fatal("the scan lost the entry")
	}
}

// carelessWrite makes a state call that fails and ignores its error.
type carelessWrite struct{ op string }

func (c carelessWrite) Process(ctx flowlet.Context, ev flowlet.Event) error {
	if err := ctx.Counters("n").Add([]byte("ok"), 1); err != nil {
		return err
	}
	huge := make([]byte, flowlet.MaxKeySize+1)
	switch c.op {
	case "put":
		_ = ctx.State("t").Put(huge, ev.Payload)
	case "delete":
		_ = ctx.State("t").Delete(huge)
	case "add":
		_ = ctx.Counters("n").Add(huge, 1)
	case "bad name":
		_ = ctx.State("Bad Name").Put([]byte("k"), ev.Payload)
	case "scan":
		it := ctx.State("Bad Name").Scan(flowlet.ScanOptions{})
		for it.Next() {
		}
		_ = it.Close()
	case "count scan":
		it := ctx.Counters("Bad Name").Scan(flowlet.ScanOptions{})
		for it.Next() {
		}
		_ = it.Close()
	}
	return nil
}

// As in the runtime: a state call that failed fails the step even if the
// flowlet ignored the error, with ErrKeyTooLarge / ErrInvalidName in the
// chain; a counter the step summed to 0 is not stored.
func TestStateCallErrorsFailTheStep(t *testing.T) {
	for op, want := range map[string]error{"put": flowlet.ErrKeyTooLarge, "delete": flowlet.ErrKeyTooLarge, "add": flowlet.ErrKeyTooLarge, "bad name": flowlet.ErrInvalidName,
		"scan": flowlet.ErrInvalidName, "count scan": flowlet.ErrInvalidName} {
		ctx := New("c")
		if err := ctx.Process(carelessWrite{op}, Event("x")); !errors.Is(err, want) {
			t.Errorf("%s: step error %v, want %v", op, err, want)
		}
		if n := ctx.Count("n", "ok"); n != 0 {
			t.Errorf("%s: the failed step's counter landed (%d)", op, n)
		}
	}
	ctx := New("c")
	ctx.Counters("n").Add([]byte("zero"), 1)
	ctx.Counters("n").Add([]byte("zero"), -1)
	it := ctx.Counters("n").Scan(flowlet.ScanOptions{})
	for it.Next() {
		t.Errorf("the step's own scan shows %q=%d, which its commit does not store", it.Key(), it.Count())
	}
	it.Close()
	ctx.Commit()
	if got := ctx.CountersMap("n"); len(got) != 0 {
		t.Errorf("committed %v, want nothing", got)
	}
}

// As in the runtime, a scan of a table or counters of a bad name visits
// nothing and its Err wraps ErrInvalidName (it said nothing); the step
// fails (TestStateCallErrorsFailTheStep).
func TestScanOfBadName(t *testing.T) {
	ctx := New("c")
	it, cit := ctx.State("Bad Name").Scan(flowlet.ScanOptions{}), ctx.Counters("Bad Name").Scan(flowlet.ScanOptions{})
	if it.Next() || !errors.Is(it.Err(), flowlet.ErrInvalidName) {
		t.Errorf("table scan: Err %v, want ErrInvalidName", it.Err())
	}
	if cit.Next() || !errors.Is(cit.Err(), flowlet.ErrInvalidName) {
		t.Errorf("counters scan: Err %v, want ErrInvalidName", cit.Err())
	}
}
