package runtime

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/tx"
)

// TestStepTimeoutIsolatesSlowEvent: a step that ran out of step_timeout
// (its commit finds the transaction gone) because of one slow event is
// redone with fewer events, so that only the slow event fails: it reaches
// the DLQ after its retries, and the events beside it are processed once.
// A timed-out step counted as a failure of each of its events, so every
// event that shared a batch with the slow one was dead-lettered with it.
func TestStepTimeoutIsolatesSlowEvent(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	a := openYAML(t, `
app: slow
flowlets:
  gen: {type: generator, config: {count: 12, batch: 12, payload: "e{seq}"}}
  sink: {type: t_refuse_3, batch_size: 8, retries: {max: 1, backoff: 1ms}}
connections:
  - {from: gen, to: sink}
`, Options{DataDir: data, NoSync: true, Drain: true})
	// A step that processes e7 runs out of its time, as if e7 were slow
	// (one that only dead-letters it does not).
	a.commitFault = func(sc *stepCtx) error {
		for _, d := range sc.dead {
			if string(d.Payload) == "e7" {
				return nil
			}
		}
		for _, e := range sc.in.evs {
			if string(e.ev.Payload) == "e7" {
				return fmt.Errorf("%w: tx timed out (test)", tx.ErrNotInProgress)
			}
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang detector
	defer cancel()
	if err := a.Run(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("run: %v (%v)", err, ctx.Err())
	}
	ok := countOf(t, a, "sink", "n", "ok")
	a.Close()
	if ok != 10 { // all but e3 (refused) and e7 (slow)
		t.Errorf("sink counted %d events, want 10", ok)
	}
	s, err := OpenStore(data)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var dead []string
	if err := s.DeadLetters("sink", 0, func(d DeadLetter) bool {
		dead = append(dead, fmt.Sprintf("%s/%d", d.Payload, d.Attempts))
		if string(d.Payload) == "e7" && !strings.Contains(d.Error, "step_timeout") {
			t.Errorf("e7's dead letter does not say the step timed out: %s", d.Error)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(dead, " "); got != "e3/1 e7/2" {
		t.Errorf("dead letters (payload/attempts) %q, want e3/1 e7/2", got)
	}
}
