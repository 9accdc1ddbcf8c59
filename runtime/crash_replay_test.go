package runtime_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCrashDLQReplay kills the CLI at random moments while it replays the
// parse flowlet's dead letters through the running app's HTTP API: runs
// take turns with parse refusing BAD lines (every third line: new dead
// letters, and the replayed ones dead-lettered again) and parse fixed (the
// replayed ones counted). After a last replay and drain with parse fixed,
// every line, BAD ones included, is counted once and in the sink file
// once, and no dead letter is left.
func TestCrashDLQReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	dir := t.TempDir()
	in := &crashInput{path: filepath.Join(dir, "input.txt"), badEvery: 3}
	broken := strings.Replace(crashApp, "app: crash", "app: crashreplay", 1)
	fixed := strings.Replace(broken, `fail: "BAD"`, `fail: "NOTHING"`, 1)
	dataDir := filepath.Join(dir, ".flowrun", "crashreplay")
	rng := rand.New(rand.NewPCG(7, 8))
	replayed := 0
	kills := 0
	for attempt := 0; kills < 10; attempt++ {
		if attempt > 100 {
			t.Fatalf("only %d kills landed", kills)
		}
		app := fixed
		if attempt%2 == 0 {
			app = broken
		}
		writeApp(t, dir, app)
		in.grow(t, 1500)
		c := startCrashChild(t, dir, crashRunArgs(attempt, "run", "app.yaml", "--drain", "--log-level", "warn")...)
		replayDone := make(chan int, 1)
		go func() {
			n := 0
			defer func() { replayDone <- n }()
			url := appURL(dataDir, c.cmd.Process.Pid, c.exited)
			if url == "" {
				return
			}
			resp, err := http.Post(url+"/api/v1/dlq/parse/replay", "", nil)
			if err != nil {
				return // killed
			}
			defer resp.Body.Close()
			var res struct{ Replayed int }
			if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&res) == nil {
				n = res.Replayed
			}
		}()
		if c.stopAfter(t, attempt, time.Duration(50+rng.IntN(300))*time.Millisecond, nil) {
			kills++
		}
		replayed += <-replayDone
	}
	// What is left: replayed offline, then drained with parse fixed.
	writeApp(t, dir, fixed)
	out, err := cliCmd(t, dir, "dlq", "replay", "app.yaml", "parse", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("dlq replay: %v\n%s", err, out)
	}
	finalDrain(t, dir)
	for l := range in.lines {
		if l%3 == 13%3 {
			in.want[fmt.Sprintf("BAD-%06d", l)] = true
		}
	}
	in.bad = 0
	checkCrashOutput(t, dir, "crashreplay", in)
	t.Logf("%d kills, %d dead letters replayed by the running app, then %s; %d lines", kills, replayed, strings.TrimSpace(string(out)), in.lines)
}
