package runtime_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// t_batch is a BatchProcessor that counts events (counter "n" key "total",
// counter "seen" key payload). Config: perm (payload substring: a permanent
// error), dle (substring: DeadLetterEvent), transient (substring: the first
// batch holding it fails once with an ordinary error).
type batchFlowlet struct{ perm, dle, transient string }

var batchCalls struct {
	sync.Mutex
	failed  map[string]bool
	batches map[string][]int // payload → sizes of the batches it was in
}

func (b *batchFlowlet) Init(ic flowlet.InitContext) error {
	b.perm, _ = ic.Config.String("perm", "")
	b.dle, _ = ic.Config.String("dle", "")
	b.transient, _ = ic.Config.String("transient", "")
	return nil
}

func (b *batchFlowlet) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	dl, _ := ctx.(runtime.EventDeadLetterer)
	for _, ev := range evs {
		p := string(ev.Payload)
		batchCalls.Lock()
		batchCalls.batches[p] = append(batchCalls.batches[p], len(evs))
		first := b.transient != "" && strings.Contains(p, b.transient) && !batchCalls.failed[p]
		batchCalls.failed[p] = batchCalls.failed[p] || first
		batchCalls.Unlock()
		switch {
		case b.perm != "" && strings.Contains(p, b.perm):
			return flowlet.Permanent(fmt.Errorf("cannot handle %q", p))
		case first:
			return errors.New("transient trouble")
		case b.dle != "" && strings.Contains(p, b.dle):
			if err := dl.DeadLetterEvent(ev, "dead-lettered by the flowlet"); err != nil {
				return err
			}
			continue
		}
		if err := ctx.Counters("n").Add([]byte("total"), 1); err != nil {
			return err
		}
		if err := ctx.Counters("seen").Add(ev.Payload, 1); err != nil {
			return err
		}
	}
	return nil
}

func init() {
	batchCalls.failed = map[string]bool{}
	batchCalls.batches = map[string][]int{}
	flowlet.Register("t_batch", func() flowlet.Flowlet { return &batchFlowlet{} }, flowlet.TypeInfo{Sink: true})
}

// TestPermanentAndDeadLetterEvent: a permanent error sends its event to the
// DLQ after one attempt (the rest of its batch commits); DeadLetterEvent
// dead-letters an event with its input and id, so both replay; a transient
// batch failure retries the whole batch before isolating events.
func TestPermanentAndDeadLetterEvent(t *testing.T) {
	batchCalls.Lock()
	clear(batchCalls.failed)
	clear(batchCalls.batches)
	batchCalls.Unlock()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	yaml := `
app: t
flowlets:
  gen: {type: generator, config: {count: 200, payload: "e{seq}.", keys: {k: "{mod:3}"}}}
  c:
    type: t_batch
    batch_size: 50
    retries: {max: 3, backoff: 1ms, max_backoff: 4ms}
    config: {perm: "${PERM:e17.}", dle: "${DLE:e42.}", transient: "e99."}
connections:
  - {from: gen, to: c, strategy: hash, key: k}
`
	a := runDrain(t, dir, yaml, runtime.Options{NoSync: true, DataDir: data})
	if n := counter(t, a, "c", "n", "total"); n != 198 {
		t.Errorf("total = %d, want 198", n)
	}
	a.Close()
	dl := deadLetters(t, data, "c")
	got := map[string]runtime.DeadLetter{}
	for _, d := range dl {
		got[string(d.Payload)] = d
	}
	if d, ok := got["e17."]; len(dl) != 2 || !ok || d.Attempts != 1 || d.Input != "gen.out" || d.EventID == "" || !strings.Contains(d.Error, `cannot handle "e17."`) {
		t.Errorf("permanent error's dead letter: %+v (of %d)", d, len(dl))
	}
	if d, ok := got["e42."]; !ok || d.Input != "gen.out" || d.EventID == "" || d.Error != "dead-lettered by the flowlet" || len(d.Keys) != 1 || d.Keys[0].Name != "k" {
		t.Errorf("DeadLetterEvent's dead letter: %+v", d)
	}
	batchCalls.Lock()
	sizes := batchCalls.batches["e99."]
	batchCalls.Unlock()
	for _, n := range sizes {
		if n == 1 {
			t.Errorf("e99 (a transient failure of its batch) was isolated: batch sizes %v", sizes)
			break
		}
	}
	if len(sizes) != 2 {
		t.Errorf("e99's batch ran %d times (%v), want 2: a failure and a whole retry", len(sizes), sizes)
	}

	r, k, err := replayDeadLetters(t, data, "c", map[string]string{"gen.out": "k"})
	if err != nil || r != 2 || k != 0 {
		t.Fatalf("replay: %d replayed, %d kept, %v", r, k, err)
	}
	t.Setenv("PERM", "nothing")
	t.Setenv("DLE", "nothing")
	a = runDrain(t, dir, yaml, runtime.Options{NoSync: true, DataDir: data})
	defer a.Close()
	if n := counter(t, a, "c", "n", "total"); n != 200 {
		t.Errorf("total after the replay = %d, want 200", n)
	}
	for _, p := range []string{"e17.", "e42."} {
		if n := counter(t, a, "c", "seen", p); n != 1 {
			t.Errorf("replayed %s seen %d times", p, n)
		}
	}
}
