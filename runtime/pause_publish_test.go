package runtime_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/testgate"
	"github.com/flowrun/flowrun/runtime"
)

// t_pubgate counts its events (counter n/events) and, a runtime.Publisher,
// its publishes (n/published); while the test holds its gate a Publish
// waits for it to open, telling the test it is there.
type pubGateFlowlet struct{}

var thePubGate testgate.Gate

func (pubGateFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	return ctx.Counters("n").Add([]byte("events"), 1)
}

func (pubGateFlowlet) Publish(ctx flowlet.Context) error {
	thePubGate.Pass()
	return ctx.Counters("n").Add([]byte("published"), 1)
}

func init() {
	flowlet.Register("t_pubgate", func() flowlet.Flowlet { return pubGateFlowlet{} }, flowlet.TypeInfo{})
}

var _ runtime.Publisher = pubGateFlowlet{}

// TestParkedNotWhilePublishing: an instance that stops while its flowlet
// is paused (removed by a scale) publishes a last time on its way out —
// a transaction; the flowlet is not parked until that is done. (Before,
// the instance no longer counted as busy then: Status said parked, no step
// running, while its Publish ran and committed.)
func TestParkedNotWhilePublishing(t *testing.T) {
	a := pausedPubGate(t, "pubpark", 2)
	ctx := context.Background()
	entered, open := thePubGate.Hold(t)
	scaled := make(chan error, 1)
	go func() {
		_, err := a.Scale(ctx, "pb", 1)
		scaled <- err
	}()
	<-entered // the removed instance's last Publish runs
	if f := flowletStatus(a.Status(), "pb"); f.Parked || f.Busy < 1 {
		t.Errorf("a Publish in flight: %+v, want not parked, busy", f)
	}
	open()
	if err := <-scaled; err != nil {
		t.Fatal(err)
	}
	if err := a.WaitPaused(ctx, "pb"); err != nil {
		t.Fatal(err)
	}
	if f := flowletStatus(a.Status(), "pb"); !f.Parked || f.Busy != 0 || f.Instances != 1 {
		t.Errorf("after the scale: %+v", f)
	}
}

// pausedPubGate runs gen → pb (t_pubgate, instances) and returns it once
// every instance started and pb is paused and parked.
func pausedPubGate(t *testing.T, app string, instances int) *runtime.App {
	t.Helper()
	dir := t.TempDir()
	a := runApp(t, plan(t, dir, fmt.Sprintf(`
app: %s
flowlets:
  gen: {type: generator, config: {rate: 200, batch: 5}}
  pb: {type: t_pubgate, instances: %d}
connections:
  - {from: gen, to: pb}
`, app, instances)), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	for ok := false; !ok; ok, _ = a.Ready() { // every instance started (and published)
		time.Sleep(5 * time.Millisecond)
	}
	if err := a.Pause("pb"); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitPaused(context.Background(), "pb"); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestParkedNotBeforeStartPublish: an instance that a scale adds to a
// paused flowlet publishes once as it starts (before it looks at the
// pause); WaitPaused after the scale waits for that publish. (Before, the
// instance counted as busy only once its goroutine ran: a WaitPaused right
// after Scale could answer parked before the new instance's Publish ran.)
func TestParkedNotBeforeStartPublish(t *testing.T) {
	a := pausedPubGate(t, "pubstart", 1)
	ctx := context.Background()
	entered, open := thePubGate.Hold(t)
	if _, err := a.Scale(ctx, "pb", 2); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- a.WaitPaused(ctx, "pb") }()
	<-entered // the new instance's first Publish runs
	select {
	case err := <-waited:
		t.Fatalf("WaitPaused answered (%v) before the new instance's Publish ran", err)
	default:
	}
	if f := flowletStatus(a.Status(), "pb"); f.Parked || f.Busy < 1 {
		t.Errorf("a Publish in flight: %+v, want not parked, busy", f)
	}
	open()
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if f := flowletStatus(a.Status(), "pb"); !f.Parked || f.Busy != 0 || f.Instances != 2 {
		t.Errorf("after the scale: %+v", f)
	}
}

// TestPausedThrottledSource: a source waiting for back-pressure is parked
// (it runs no step), and once the backlog is gone it still runs none until
// resumed.
func TestPausedThrottledSource(t *testing.T) {
	dir := t.TempDir()
	a := runApp(t, plan(t, dir, `
app: pthrottle
flowlets:
  gen: {type: generator, config: {batch: 10, max_backlog: 20}}
  cnt: {type: t_ticker}
connections:
  - {from: gen, to: cnt}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	ctx := context.Background()
	if err := a.Pause("cnt"); err != nil {
		t.Fatal(err)
	}
	// The generator fills cnt's queue and waits.
	for f := flowletStatus(a.Status(), "gen"); f.Throttled == 0; f = flowletStatus(a.Status(), "gen") {
		time.Sleep(5 * time.Millisecond)
	}
	if err := a.Pause("gen"); err != nil {
		t.Fatal(err)
	}
	if err := a.WaitPaused(ctx, "gen"); err != nil {
		t.Fatal(err)
	}
	g0 := flowletStatus(a.Status(), "gen")
	if err := a.Resume("cnt"); err != nil {
		t.Fatal(err)
	}
	// cnt takes everything the generator made; the generator, paused,
	// makes no more.
	for n := counter(t, a, "cnt", "n", "events"); n < int64(g0.Emitted); n = counter(t, a, "cnt", "n", "events") {
		time.Sleep(5 * time.Millisecond)
	}
	for f := flowletStatus(a.Status(), "cnt"); f.Backlog != 0; f = flowletStatus(a.Status(), "cnt") {
		time.Sleep(5 * time.Millisecond)
	}
	if err := a.WaitPaused(ctx, "gen"); err != nil {
		t.Fatal(err)
	}
	if g := flowletStatus(a.Status(), "gen"); g.Emitted != g0.Emitted || !g.Parked {
		t.Errorf("paused generator: %+v, parked at %+v", g, g0)
	}
	if n := counter(t, a, "cnt", "n", "events"); n != int64(g0.Emitted) {
		t.Errorf("cnt counted %d, the generator emitted %d", n, g0.Emitted)
	}
}
