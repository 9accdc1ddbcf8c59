package runtime_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// t_batchfail is a batch flowlet: it counts every event of the batch
// (counters n/total and seen/payload "e<seq>") and emits it, then fails
// the whole batch if it holds an event with seq%37 == 13 (a permanent
// error if seq%74 == 13).
type batchFail struct{}

func (batchFail) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	var bad error
	for _, ev := range evs {
		if err := ctx.Counters("n").Add([]byte("total"), 1); err != nil {
			return err
		}
		if err := ctx.Counters("seen").Add(ev.Payload, 1); err != nil {
			return err
		}
		if err := ctx.Emit("out", ev.Payload); err != nil {
			return err
		}
		seq, err := strconv.Atoi(strings.TrimPrefix(string(ev.Payload), "e"))
		if err != nil {
			return err
		}
		if seq%37 == 13 && bad == nil {
			bad = fmt.Errorf("refusing %q", ev.Payload)
			if seq%74 == 13 {
				bad = flowlet.Permanent(bad)
			}
		}
	}
	return bad
}

func init() {
	flowlet.Register("t_batchfail", func() flowlet.Flowlet { return batchFail{} }, flowlet.TypeInfo{Outputs: []string{"out"}})
}

// TestBatchFailureIsolatedExactlyOnce: a batch flowlet whose batches fail
// because of one event: the batch is retried, then processed event by
// event; the failing events go to the dead-letter queue exactly once each
// (after retries.max + 1 attempts, or at once when permanent), nothing of
// their attempts lands (state, emits), and every other event is counted
// and forwarded exactly once — with several instances sharing the retry
// budget.
func TestBatchFailureIsolatedExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	a := runDrain(t, dir, `
app: bf
flowlets:
  gen: {type: generator, config: {count: 400, batch: 40, payload: "e{seq}"}}
  b:
    type: t_batchfail
    instances: 2
    batch_size: 16
    retries: {max: 2, backoff: 1ms, max_backoff: 2ms}
  cnt: {type: t_count}
connections:
  - {from: gen, to: b, strategy: fifo}
  - {from: b, to: cnt}
`, runtime.Options{NoSync: true})
	defer a.Close()
	var good int64
	bad := map[string]bool{}
	for i := range 400 {
		p := fmt.Sprintf("e%d", i)
		n, m := counter(t, a, "b", "seen", p), counter(t, a, "cnt", "seen", p)
		if i%37 == 13 {
			bad[p] = true
			if n != 0 || m != 0 {
				t.Errorf("failing %s: counted %d times by b, %d by cnt, want never", p, n, m)
			}
			continue
		}
		good++
		if n != 1 || m != 1 {
			t.Errorf("%s: counted %d times by b, %d by cnt, want once", p, n, m)
		}
	}
	if n := counter(t, a, "b", "n", "total"); n != good {
		t.Errorf("b total %d, want %d", n, good)
	}
	if n := counter(t, a, "cnt", "n", "total"); n != good {
		t.Errorf("cnt total %d, want %d", n, good)
	}
	a.Close()
	dl := deadLetters(t, filepath.Join(dir, "data"), "b")
	seen := map[string]int{}
	for _, d := range dl {
		p := string(d.Payload)
		seen[p]++
		seq, _ := strconv.Atoi(strings.TrimPrefix(p, "e"))
		want := 3
		if seq%74 == 13 {
			want = 1
		}
		if d.Attempts != want {
			t.Errorf("dead letter %s: %d attempts, want %d (%s)", p, d.Attempts, want, d.Error)
		}
	}
	for p := range bad {
		if seen[p] != 1 {
			t.Errorf("%s dead-lettered %d times, want once", p, seen[p])
		}
	}
	if len(dl) != len(bad) {
		t.Errorf("%d dead letters, want %d", len(dl), len(bad))
	}
}
