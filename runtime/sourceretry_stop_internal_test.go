package runtime

import (
	"context"
	"errors"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

// TestRetryEndsAtStop: a source's step (its commit or its Generate
// failed), a tick, or a consumer's step (its commit or its event failed)
// that waits out its backoff when the app stops is not retried: the wait ends and so does the instance, nothing of
// the step committed (a restart redoes it). The wait returned at once and
// the step was retried back to back, every retry failing, until the
// retries ran out: the source stopped "after retries" (an error in its
// status), the tick went to the dead-letter queue. (A consumer's step held
// already: its next attempt finds the stop, or the event's backoff, before
// it runs or commits.)
func TestRetryEndsAtStop(t *testing.T) {
	for _, who := range []string{"src", "generate", "tick", "step", "event"} {
		t.Run(who, func(t *testing.T) {
			src, sink := "generator, config: {count: 1}", "t_own_ticker, tick: 1ms"
			switch who {
			case "generate":
				src = "t_fail_gen"
			case "event":
				sink = "t_fail_stop"
			}
			a := openYAML(t, `
app: retrystop
flowlets:
  src: {type: `+src+`, retries: {max: 200, backoff: 10s, max_backoff: 10s}}
  sink: {type: `+sink+`, retries: {max: 200, backoff: 10s, max_backoff: 10s}}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			attempts := 0
			ownStepDone.Store(false)
			failed := make(chan struct{}, 1)
			failStop = func() {
				attempts++
				select {
				case failed <- struct{}{}:
				default:
				}
			}
			a.commitFault = func(sc *stepCtx) error {
				switch {
				case who == "src" && sc.in.fl.Name == "src":
				case (who == "tick" || who == "step") && sc.in.fl.Name == "sink" && ownStepDone.Swap(false) == (who == "tick"):
				default:
					return nil
				}
				attempts++
				cancel() // the app stops while the step waits to be retried
				return errors.New("refused (test)")
			}
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			switch who {
			case "generate":
				// The app stops once the source took the failure for one (it
				// checked for a stop before): it waits out its backoff.
				<-failed
				st := a.byName["src"].insts[0].st
				pollUntil(t, "the source's failure counted", func() bool { return st.failed.Load() > 0 })
				cancel()
			case "event":
				// The app stops while the sink waits out its backoff.
				<-failed
				pollUntil(t, "the sink's retry wait", func() bool { return a.unsettled.Load() > 0 })
				cancel()
			}
			waitRunNil(t, done)
			if attempts != 1 {
				t.Errorf("the failed step was tried %d times, want once: not retried once the app stopped", attempts)
			}
			if p := a.sourceErr.Load(); p != nil {
				t.Errorf("the source counts as stopped on an error: %v", *p)
			}
			dead := 0
			if err := a.Inspect().DeadLetters("sink", 0, func(DeadLetter) bool { dead++; return true }); err != nil {
				t.Fatal(err)
			}
			if dead != 0 {
				t.Errorf("%d dead letters of sink, want none: the tick was not given up", dead)
			}
		})
	}
}

// t_fail_stop fails every event, calling failStop first.
type failStopFlowlet struct{}

var failStop func()

func (failStopFlowlet) Process(flowlet.Context, flowlet.Event) error {
	failStop()
	return errors.New("refused (test)")
}

// t_fail_gen is a source whose Generate fails, calling failStop first.
type failGen struct{}

func (failGen) Generate(flowlet.Context) error {
	failStop()
	return errors.New("refused (test)")
}

func init() {
	flowlet.Register("t_fail_stop", func() flowlet.Flowlet { return failStopFlowlet{} }, flowlet.TypeInfo{Sink: true})
	flowlet.Register("t_fail_gen", func() flowlet.Flowlet { return failGen{} }, flowlet.TypeInfo{Source: true, Outputs: []string{"out"}})
}
