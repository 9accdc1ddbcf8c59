package runtime_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// cliCmd returns the test binary as the flowrun CLI with args.
func cliCmd(t testing.TB, dir string, args ...string) *exec.Cmd {
	t.Helper()
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0])
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FLOWRUN_CLI_ARGS="+string(b))
	return cmd
}

const crashApp = `
app: crash
flowlets:
  reader:
    type: file_source
    config: {path: input.txt, lines_per_step: 1000}
  parse:
    type: t_count
    instances: 2
    batch_size: 500
    retries: {max: 0}
    config: {emit: true, key: p, fail: "BAD"}
  count:
    type: t_count
    instances: 2
    batch_size: 500
  sink:
    type: file_sink
    config: {path: out.txt}
connections:
  - {from: reader, to: parse, strategy: round_robin}
  - {from: parse, to: count, strategy: hash, key: p}
  - {from: parse, to: sink}
`

// crashInput is a file_source input that grows by a chunk of lines at a
// time: "line-N", except every 499th line (badEvery) from 13, "BAD-N"
// (refused by the parse flowlet: dead-lettered), and, with flaky, every 499th from 101,
// "FLK-N" (fails a few attempts, then goes through).
type crashInput struct {
	path  string
	flaky bool
	// badEvery: every badEvery-th line is BAD (0: 499).
	badEvery int
	lines    int
	want     map[string]bool // the lines the counters and the sink must hold once
	bad      int             // BAD lines: one dead letter each
}

func (c *crashInput) grow(t *testing.T, chunk int) {
	t.Helper()
	if c.want == nil {
		c.want = map[string]bool{}
	}
	badEvery := c.badEvery
	if badEvery == 0 {
		badEvery = 499
	}
	var in bytes.Buffer
	for i := c.lines; i < c.lines+chunk; i++ {
		l := fmt.Sprintf("line-%06d", i)
		switch {
		case i%badEvery == 13%badEvery:
			l = fmt.Sprintf("BAD-%06d", i)
			c.bad++
		case c.flaky && i%499 == 101:
			l = fmt.Sprintf("FLK-%06d", i)
			c.want[l] = true
		default:
			c.want[l] = true
		}
		in.WriteString(l + "\n")
	}
	c.lines += chunk
	f, err := os.OpenFile(c.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		_, err = f.Write(in.Bytes())
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
}

// crashChild is a run of the CLI that the test kills. exited is closed
// when it ended, with err.
type crashChild struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
	stderr bytes.Buffer
}

func startCrashChild(t *testing.T, dir string, args ...string) *crashChild {
	t.Helper()
	c := &crashChild{cmd: cliCmd(t, dir, args...), exited: make(chan struct{})}
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	return c
}

func (c *crashChild) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// stopAfter stops the child with stop (nil: kill) after delay unless it
// ended first; a run that failed fails the test. It reports whether it
// stopped the child.
func (c *crashChild) stopAfter(t *testing.T, attempt int, delay time.Duration, stop func()) bool {
	t.Helper()
	select {
	case <-c.exited:
		if c.err != nil {
			t.Fatalf("run %d: %v\n%s", attempt, c.err, c.stderr.String())
		}
		return false
	case <-time.After(delay):
		if stop == nil {
			stop = c.kill
		}
		stop()
		return true
	}
}

// interrupt stops the child with SIGTERM and, unless it exited within
// second, a second SIGTERM (exit at once, 128+15: the steps in flight
// abort as after kill -9). It returns an error for any other end.
func (c *crashChild) interrupt(second time.Duration) error {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(second):
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.exited:
		case <-time.After(time.Minute): // a hang detector
			c.kill()
			return fmt.Errorf("still running a minute after the second SIGTERM\n%s", c.stderr.String())
		}
	}
	// Killed by the signal itself: it came before the CLI's handler (as kill
	// -9 then).
	var ee *exec.ExitError
	if c.err != nil && (!errors.As(c.err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) &&
		!(ee.ExitCode() == -1 && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM)) {
		return fmt.Errorf("stopped by SIGTERM: %v\n%s", c.err, c.stderr.String())
	}
	return nil
}

// crashRunArgs are the arguments of kill run number attempt: runs take
// turns with the durable store, --no-sync, and the durable store with
// --defer-commits (runtime/deferred.go).
func crashRunArgs(attempt int, args ...string) []string {
	switch attempt % 3 {
	case 1:
		args = append(args, "--no-sync")
	case 2:
		args = append(args, "--defer-commits")
	}
	return args
}

// TestCrashExactlyOnce kills the CLI with SIGKILL at random moments at least
// 20 times, restarting it each time, then lets it drain, and compares every
// result with an independent count of the input: the counters, the dead
// letters and the file sink's output.
func TestCrashExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test")
	}
	dir := t.TempDir()
	// The input grows by a chunk whenever a run drains before its kill (a
	// fast machine), so the test needs no timing assumption.
	const chunk = 12000
	in := &crashInput{path: filepath.Join(dir, "input.txt")}
	in.grow(t, chunk)
	writeApp(t, dir, crashApp)
	kills := killRuns(t, dir, in, chunk, rand.New(rand.NewPCG(1, 2)))
	finalDrain(t, dir)
	checkCrashOutput(t, dir, "crash", in)
	t.Logf("%d kills; %d lines, %d dead letters", kills, in.lines, in.bad)
}

// killRuns runs the app in dir and kills it at a random moment, 20 times
// in all; a run that drains before its kill makes the input chunk lines
// longer, so that no timing is assumed. It returns the kills.
func killRuns(t *testing.T, dir string, in *crashInput, chunk int, rng *rand.Rand) int {
	t.Helper()
	kills := 0
	for attempt := 0; kills < 20; attempt++ {
		if attempt > 200 {
			t.Fatalf("only %d kills landed", kills)
		}
		c := startCrashChild(t, dir, crashRunArgs(attempt, "run", "app.yaml", "--drain", "--log-level", "warn")...)
		delay := time.Duration(20+rng.IntN(300)) * time.Millisecond
		if c.stopAfter(t, attempt, delay, nil) {
			kills++
			continue
		}
		t.Logf("run %d drained before its kill at %v, after %d kills: %d more lines", attempt, delay, kills, chunk)
		in.grow(t, chunk)
	}
	return kills
}

// finalDrain runs the app in dir to the end of its input.
func finalDrain(t *testing.T, dir string) {
	t.Helper()
	cmd := cliCmd(t, dir, "run", "app.yaml", "--drain", "--no-sync", "--log-level", "warn")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("final run: %v\n%s", err, out)
	}
}

// checkCrashOutput compares the drained store of app in dir and its file
// sink's out.txt with the input: the count flowlet's counters, parse's
// dead letters and the sink's lines hold every line exactly once.
func checkCrashOutput(t *testing.T, dir, app string, in *crashInput) {
	t.Helper()
	s, err := runtime.OpenStore(filepath.Join(dir, ".flowrun", app))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	view := func(fl string, fn func(runtime.StateReader) error) error { return s.View(app, fl, fn) }
	seen := seenIn(t, view, "count")
	var total int64
	if err := view("count", func(r runtime.StateReader) error {
		var err error
		total, err = r.Counters("n").Get([]byte("total"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if total != int64(len(in.want)) {
		t.Errorf("count: total %d, want %d", total, len(in.want))
	}
	for k, n := range seen {
		if n != 1 || !in.want[k] {
			t.Errorf("count: %q counted %d times", k, n)
		}
	}
	if len(seen) != len(in.want) {
		t.Errorf("count: %d distinct lines counted, want %d", len(seen), len(in.want))
	}
	var dead []runtime.DeadLetter
	if err := s.DeadLetters("parse", 0, func(d runtime.DeadLetter) bool { dead = append(dead, d); return true }); err != nil {
		t.Fatal(err)
	}
	deadSet := map[string]int{}
	for _, d := range dead {
		deadSet[string(d.Payload)]++
	}
	if len(dead) != in.bad || len(deadSet) != in.bad {
		t.Errorf("dead letters: %d (%d distinct), want %d", len(dead), len(deadSet), in.bad)
	}
	for p := range deadSet {
		if !strings.HasPrefix(p, "BAD-") {
			t.Errorf("dead letter %q: not a BAD line", p)
		}
	}
	f, err := os.Open(filepath.Join(dir, "out.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]int{}
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		got[sc.Text()]++
		n++
	}
	if n != len(in.want) || len(got) != len(in.want) {
		t.Errorf("sink file: %d lines, %d distinct, want %d", n, len(got), len(in.want))
	}
	for k, c := range got {
		if c != 1 || !in.want[k] {
			t.Errorf("sink file: %q %d times", k, c)
			break
		}
	}
}
