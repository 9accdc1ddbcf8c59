package runtime_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// crashScaleApp is crashApp with retries before the DLQ (BAD fails three
// times, FLK twice and then goes through), a back-pressure bound the reader
// meets all the time, and a file sink fed by a flowlet that is rescaled.
const crashScaleApp = `
app: crashscale
flowlets:
  reader:
    type: file_source
    config: {path: input.txt, lines_per_step: 300, max_backlog: 600}
  parse:
    type: t_count
    instances: 2
    batch_size: 100
    retries: {max: 2, backoff: 1ms, max_backoff: 2ms}
    config: {emit: true, key: p, fail: "BAD", flaky: "FLK", flaky_times: 2}
  count:
    type: t_count
    instances: 2
    batch_size: 100
  sink:
    type: file_sink
    config: {path: out.txt}
connections:
  - {from: reader, to: parse, strategy: round_robin, partitions: 8}
  - {from: parse, to: count, strategy: hash, key: p, partitions: 8}
  - {from: parse, to: sink}
`

// appURL waits for the HTTP API of the run with pid to write its address
// into the data directory's http.json (a killed run's file stays behind:
// its pid tells it apart). It returns "" if the run ended first.
func appURL(dataDir string, pid int, ended <-chan struct{}) string {
	for {
		var info struct {
			URL string `json:"url"`
			PID int    `json:"pid"`
		}
		if b, err := os.ReadFile(filepath.Join(dataDir, "http.json")); err == nil &&
			json.Unmarshal(b, &info) == nil && info.PID == pid {
			return info.URL
		}
		select {
		case <-ended:
			return ""
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestCrashScaleRetryDLQ kills the CLI at least 20 times (and stops it
// with one or two SIGTERMs some more times) while the test
// rescales parse and count through the HTTP API, the reader waits for
// back-pressure and events are retried on their way to the DLQ; then it
// drains and checks every line counted once, in the sink file once, and
// every BAD line dead-lettered once (attempts restart with a run: the
// DLQ still gets one record).
func TestCrashScaleRetryDLQ(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	resetFlaky()
	dir := t.TempDir()
	const chunk = 6000
	in := &crashInput{path: filepath.Join(dir, "input.txt"), flaky: true}
	in.grow(t, chunk)
	writeApp(t, dir, crashScaleApp)
	dataDir := filepath.Join(dir, ".flowrun", "crashscale")
	rng := rand.New(rand.NewPCG(3, 4))
	var scaled atomic.Int64
	kills, stops := 0, 0
	for attempt := 0; kills < 20; attempt++ {
		if attempt > 200 {
			t.Fatalf("only %d kills landed", kills)
		}
		c := startCrashChild(t, dir, crashRunArgs(attempt, "run", "app.yaml", "--drain", "--log-level", "warn")...)
		scalerDone := make(chan struct{})
		scaleSeed := rng.Uint64()
		go func() {
			defer close(scalerDone)
			url := appURL(dataDir, c.cmd.Process.Pid, c.exited)
			r := rand.New(rand.NewPCG(scaleSeed, 0))
			cl := &http.Client{Timeout: 10 * time.Second}
			for url != "" {
				fl := []string{"parse", "count"}[r.IntN(2)]
				resp, err := cl.Post(fmt.Sprintf("%s/api/v1/flowlets/%s/scale?instances=%d", url, fl, 1+r.IntN(4)), "", nil)
				if err != nil {
					return // the run ended
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					scaled.Add(1)
				}
				select {
				case <-c.exited:
					return
				case <-time.After(time.Duration(r.IntN(30)) * time.Millisecond):
				}
			}
		}()
		delay := time.Duration(50+rng.IntN(400)) * time.Millisecond
		// One stop in three is by SIGTERM, or a second SIGTERM soon after
		// (exit at once): stops at random points too.
		byTerm := rng.IntN(3) == 0
		secondTerm := time.Duration(rng.IntN(50)) * time.Millisecond
		stopped := c.stopAfter(t, attempt, delay, func() {
			if !byTerm {
				c.kill()
				kills++
				return
			}
			if err := c.interrupt(secondTerm); err != nil {
				t.Errorf("run %d: %v", attempt, err)
			}
			stops++
		})
		<-scalerDone
		if t.Failed() {
			t.FailNow()
		}
		if !stopped {
			t.Logf("run %d drained before its stop at %v, after %d kills: %d more lines", attempt, delay, kills, chunk)
			in.grow(t, chunk)
		}
	}
	finalDrain(t, dir)
	checkCrashOutput(t, dir, "crashscale", in)
	if scaled.Load() == 0 {
		t.Error("no scale went through: the test did not rescale anything")
	}
	t.Logf("%d kills, %d SIGTERM stops, %d scales; %d lines, %d dead letters", kills, stops, scaled.Load(), in.lines, in.bad)
}
