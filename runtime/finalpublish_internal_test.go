package runtime

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
)

// lastPublishFails is a Publisher whose first Publish (the one at its
// instance's start) succeeds and every later one fails.
type lastPublishFails struct{ publisher }

var lastPublishCalls atomic.Int64

func (lastPublishFails) Publish(ctx flowlet.Context) error {
	if lastPublishCalls.Add(1) == 1 {
		return nil
	}
	return errors.New("publish refused (test)")
}

func init() {
	flowlet.Register("t_last_publish_fails", func() flowlet.Flowlet { return lastPublishFails{} }, flowlet.TypeInfo{Sink: true})
}

// TestFinalPublishFailureFailsRun: the last publish of a stopping instance
// (what its committed steps left unpublished goes out before exit) failed
// after its retries and Run returned nil: `flowrun run --drain` exited 0
// with the sink's output not out. Its error is the run's now, as a step's
// publish failure is.
func TestFinalPublishFailureFailsRun(t *testing.T) {
	a := openYAML(t, `
app: lastpub
flowlets:
  gen: {type: generator, config: {count: 0}}
  sink: {type: t_last_publish_fails, retries: {max: 1, backoff: 1ms}}
connections:
  - {from: gen, to: sink}
`, Options{NoSync: true})
	lastPublishCalls.Store(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(time.Minute) // a hang detector
	for lastPublishCalls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sink's first publish never came")
		}
		time.Sleep(time.Millisecond)
	}
	cancel() // stop: the instance's last publish runs and fails
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatalf("the app did not stop: %+v", a.Status())
	}
	if n := lastPublishCalls.Load(); n < 3 {
		t.Fatalf("%d publishes, want at least the start's and the last one's two attempts", n)
	}
	if err == nil || !strings.Contains(err.Error(), "publish refused (test)") {
		t.Fatalf("run: %v, want the last publish's failure", err)
	}
}

// TestSettleErrorKeptBesideOwn: an instance whose last publish (or own
// step) failed and whose final settle then failed too ends with both
// errors; the settle's, which says commits may not be on disk, was
// dropped for the first.
func TestSettleErrorKeptBesideOwn(t *testing.T) {
	own, sync := errors.New("publish refused (test)"), errors.New("sync failed (test)")
	if err := withSettleErr(own, sync); !errors.Is(err, own) || !errors.Is(err, sync) {
		t.Errorf("both failed: %v, want both", err)
	}
	if err := withSettleErr(nil, sync); err != sync {
		t.Errorf("settle failed: %v, want %v", err, sync)
	}
	if err := withSettleErr(own, nil); err != own {
		t.Errorf("own failed: %v, want %v", err, own)
	}
	if err := withSettleErr(nil, nil); err != nil {
		t.Errorf("none failed: %v", err)
	}
}
