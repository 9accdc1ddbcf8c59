package runtime_test

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime"
)

// TestCrashSourceSplit is TestCrashExactlyOnce with the file source's steps
// failing as too large (runtime.SplitFaultEnv): every step of 1000 lines is
// split, and every line SplitCrashDropped names is split down to and
// dead-lettered by the source. Each line then reaches the counters and the
// sink once, or the source's DLQ once.
func TestCrashSourceSplit(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	t.Setenv(runtime.SplitFaultEnv, "1") // the children's
	dir := t.TempDir()
	const chunk = 12000
	in := &crashInput{path: filepath.Join(dir, "input.txt")}
	in.grow(t, chunk)
	writeApp(t, dir, strings.ReplaceAll(crashApp, "reader", "src"))
	kills := killRuns(t, dir, in, chunk, rand.New(rand.NewPCG(5, 6)))
	finalDrain(t, dir)
	dropped := map[string]bool{}
	for l := range in.want {
		if runtime.SplitCrashDropped(l) {
			dropped[l] = true
			delete(in.want, l)
		}
	}
	checkCrashOutput(t, dir, "crash", in)
	s, err := runtime.OpenStore(filepath.Join(dir, ".flowrun", "crash"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := map[string]int{}
	if err := s.DeadLetters("src", 0, func(d runtime.DeadLetter) bool { got[string(d.Payload)]++; return true }); err != nil {
		t.Fatal(err)
	}
	for l := range dropped {
		if got[l] != 1 {
			t.Errorf("%s: %d dead letters of the source, want 1", l, got[l])
		}
	}
	if len(got) != len(dropped) {
		t.Errorf("the source dead-lettered %d lines, want the %d dropped", len(got), len(dropped))
	}
	t.Logf("%d kills; %d lines, %d dropped by the source", kills, in.lines, len(dropped))
}
