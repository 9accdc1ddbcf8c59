package runtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSourceRetryBudgetFreshAfterPause: a source whose step failed and was
// paused before its retry takes no step while paused, and its first step
// after the resume has the whole retry budget (retries.max). The retries
// ran on while it was paused, with the attempts before the pause counted:
// here the source stopped, its budget spent, while paused.
func TestSourceRetryBudgetFreshAfterPause(t *testing.T) {
	a := openYAML(t, `
app: retrypause
flowlets:
  src: {type: generator, retries: {max: 2, backoff: 1ms}, config: {count: 10, batch: 10}}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true, Drain: true})
	failing := errors.New("refused (test)")
	attempts, whilePaused := 0, 0
	paused := make(chan struct{})
	onSrcCommit(a, func(sc *stepCtx, evs []string) error {
		attempts++
		if sc.in.frt.paused.Load() {
			whilePaused++
		}
		switch attempts {
		case 1:
			if err := a.Pause("src"); err != nil {
				t.Error(err)
			}
			close(paused)
			return failing
		case 2, 3: // the step after the resume: within its retries (max 2)
			return failing
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	select {
	case <-paused:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}
	if err := a.WaitPaused(ctx, "src"); err != nil {
		t.Fatal(err)
	}
	if err := a.Resume("src"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if whilePaused > 0 {
		t.Errorf("%d steps of src ran while it was paused", whilePaused)
	}
	n := countOf(t, a, "sink", "n", "ok")
	if n != 10 {
		t.Errorf("sink counted %d events, want 10 (attempts %d)", n, attempts)
	}
}
