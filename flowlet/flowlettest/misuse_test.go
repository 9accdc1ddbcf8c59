package flowlettest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

// keeper keeps what it was given past its step, as a careless flowlet does.
type keeper struct {
	ctx     flowlet.Context
	table   flowlet.Table
	count   flowlet.Counters
	it      flowlet.Iterator
	payload []byte
}

func (k *keeper) Process(ctx flowlet.Context, ev flowlet.Event) error {
	k.ctx, k.table, k.count = ctx, ctx.State("t"), ctx.Counters("n")
	k.it = k.table.Scan(flowlet.ScanOptions{})
	k.payload = ev.Payload
	copy(ev.Payload, bytes.ToUpper(ev.Payload)) // in place
	return ctx.Emit("out", ev.Payload)
}

// TestKeptPastItsStep: as in the runtime, the Context a step got, and the
// tables, counters and iterators it gave out, answer ErrStepEnded once the
// step returned (they went on working before, and their writes and emits
// joined whatever step came next); the flowlet got its own copy of the
// event's payload (it mutated the test's), and a payload kept past the step
// no longer holds the event (a plugin's buffers are reused by the next
// batch).
func TestKeptPastItsStep(t *testing.T) {
	ctx := New("k")
	k := &keeper{}
	ev := Event("abc")
	if err := ctx.Process(k, ev); err != nil {
		t.Fatal(err)
	}
	if string(ev.Payload) != "abc" {
		t.Errorf("the flowlet's change of its payload reached the test's event: %q", ev.Payload)
	}
	if got := ctx.Emits("out"); len(got) != 1 || got[0] != "ABC" {
		t.Errorf("emits %q, want [ABC]", got)
	}
	if string(k.payload) == "ABC" {
		t.Errorf("the payload kept past its step still holds the event")
	}
	for name, err := range map[string]error{
		"Emit":         k.ctx.Emit("out", []byte("late")),
		"State().Put":  k.ctx.State("t").Put([]byte("k"), []byte("v")),
		"Counters.Add": k.ctx.Counters("n").Add([]byte("k"), 1),
		"table.Put":    k.table.Put([]byte("k"), []byte("v")),
		"table.Delete": k.table.Delete([]byte("k")),
		"counters.Add": k.count.Add([]byte("k"), 1),
		"DeadLetter":   k.ctx.(interface{ DeadLetter([]byte, string) error }).DeadLetter([]byte("x"), "late"),
	} {
		if !errors.Is(err, flowlet.ErrStepEnded) {
			t.Errorf("%s after the step: %v, want ErrStepEnded", name, err)
		}
	}
	if _, _, err := k.table.Get([]byte("k")); !errors.Is(err, flowlet.ErrStepEnded) {
		t.Errorf("table.Get after the step: %v, want ErrStepEnded", err)
	}
	if _, err := k.count.Get([]byte("k")); !errors.Is(err, flowlet.ErrStepEnded) {
		t.Errorf("counters.Get after the step: %v, want ErrStepEnded", err)
	}
	if k.it.Next() || !errors.Is(k.it.Err(), flowlet.ErrStepEnded) {
		t.Errorf("iterator after the step: Err %v, want ErrStepEnded", k.it.Err())
	}
	select {
	case <-k.ctx.Done():
	default:
		t.Error("the ended step's Done is not closed")
	}
	if !errors.Is(context.Cause(k.ctx), flowlet.ErrStepEnded) {
		t.Errorf("the ended step's cause: %v", context.Cause(k.ctx))
	}
	// Nothing of the late calls reaches a later step.
	if err := ctx.Process(&keeper{}, Event("d")); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ctx.Emits("out")); got != "[ABC D]" {
		t.Errorf("emits %s, want [ABC D]", got)
	}
	if got := ctx.Table("t"); len(got) != 0 {
		t.Errorf("table %v: a late write landed", got)
	}
	if got := ctx.CountersMap("n"); len(got) != 0 {
		t.Errorf("counters %v: a late add landed", got)
	}
}

// fanOut uses its Context from several goroutines during the step, and
// waits for them before returning.
type fanOut struct{}

func (fanOut) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				key := []byte(fmt.Sprint(g, "/", i))
				if err := errors.Join(ctx.Emit("out", key), ctx.Counters("n").Add([]byte("all"), 1), ctx.State("t").Put(key, key)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestConcurrentUseDuringStep: as in the runtime, calls from goroutines of
// the step are serialized; they crashed the test binary (concurrent map
// writes) or lost emits before.
func TestConcurrentUseDuringStep(t *testing.T) {
	ctx := New("f")
	if err := ctx.Process(fanOut{}, Event("x")); err != nil {
		t.Fatal(err)
	}
	if n, m, c := len(ctx.Emits("out")), len(ctx.Table("t")), ctx.Count("n", "all"); n != 800 || m != 800 || c != 800 {
		t.Errorf("%d emits, %d puts, count %d; want 800 each", n, m, c)
	}
}
