package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestBackPressure: a fast source over a slow consumer never gets further
// ahead than its max_backlog plus one step of each instance; every event
// still arrives once. The runtime takes max_backlog out of the config (the
// generator rejects unknown keys).
func TestBackPressure(t *testing.T) {
	dir := t.TempDir()
	p := plan(t, dir, `
app: t
flowlets:
  gen: {type: generator, instances: 2, config: {count: 3000, batch: 50, max_backlog: 200}}
  cnt: {type: t_count, batch_size: 5}
connections:
  - {from: gen, to: cnt}
`)
	a, err := runtime.Open(p, runtime.Options{NoSync: true, Drain: true, DataDir: dir + "/data"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var worst int64
	samples := 0
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		case <-time.After(10 * time.Millisecond):
			for _, q := range a.Status().Queues {
				if q.Name == "gen.out" {
					worst = max(worst, q.Lag["cnt"])
					samples++
				}
			}
		}
	}
	if ctx.Err() != nil {
		t.Fatal("did not drain")
	}
	if n := counter(t, a, "cnt", "n", "total"); n != 3000 {
		t.Errorf("total %d, want 3000", n)
	}
	const bound = 200 + 2*50 // max_backlog + one Generate step per instance
	if worst > bound {
		t.Errorf("backlog reached %d, bound %d", worst, bound)
	}
	gen := flowletStatus(a.Status(), "gen")
	if gen.Throttled == 0 {
		t.Errorf("the generator never waited for its consumer: %+v", gen)
	}
	t.Logf("largest backlog seen %d in %d samples; generator throttled %d times", worst, samples, gen.Throttled)
}
