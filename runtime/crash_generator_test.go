package runtime_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestCrashGenerator kills the CLI at random moments while a generator of
// three instances feeds a hash-partitioned counter of two, until a run
// drains; every number is then counted exactly once.
func TestCrashGenerator(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	const count = 60000
	dir := t.TempDir()
	writeApp(t, dir, fmt.Sprintf(`
app: crashgen
flowlets:
  gen: {type: generator, instances: 3, config: {count: %d, batch: 300, payload: "g{seq}", keys: {k: "{seq}"}, max_backlog: 3000}}
  count: {type: t_count, instances: 2, batch_size: 200}
connections:
  - {from: gen, to: count, strategy: hash, key: k}
`, count))
	rng := rand.New(rand.NewPCG(9, 10))
	kills := 0
	for attempt := 0; kills < 20; attempt++ {
		c := startCrashChild(t, dir, crashRunArgs(attempt, "run", "app.yaml", "--drain", "--log-level", "warn")...)
		if !c.stopAfter(t, attempt, time.Duration(30+rng.IntN(250))*time.Millisecond, nil) {
			break // drained
		}
		kills++
	}
	finalDrain(t, dir)
	s, err := runtime.OpenStore(filepath.Join(dir, ".flowrun", "crashgen"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := seenIn(t, func(fl string, fn func(runtime.StateReader) error) error { return s.View("crashgen", fl, fn) }, "count")
	wrong := 0
	for i := range count {
		if n := got[fmt.Sprintf("g%d", i)]; n != 1 {
			if wrong++; wrong <= 5 {
				t.Errorf("g%d counted %d times", i, n)
			}
		}
	}
	if len(got) != count {
		t.Errorf("%d distinct events counted, want %d", len(got), count)
	}
	t.Logf("%d kills; %d numbers counted other than once", kills, wrong)
}
