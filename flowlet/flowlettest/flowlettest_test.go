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
