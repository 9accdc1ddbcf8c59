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
	lines := 0
	want := map[string]bool{}
	bad := 0
	grow := func() {
		var in bytes.Buffer
		for i := lines; i < lines+chunk; i++ {
			l := fmt.Sprintf("line-%06d", i)
			if i%499 == 13 {
				l = fmt.Sprintf("BAD-%06d", i)
				bad++
			} else {
				want[l] = true
			}
			in.WriteString(l + "\n")
		}
		lines += chunk
		f, err := os.OpenFile(filepath.Join(dir, "input.txt"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err == nil {
			_, err = f.Write(in.Bytes())
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	grow()
	writeApp(t, dir, crashApp)
	rng := rand.New(rand.NewPCG(1, 2))
	kills := 0
	for attempt := 0; kills < 20; attempt++ {
		if attempt > 200 {
			t.Fatalf("only %d kills landed", kills)
		}
		// Runs take turns: the durable store, --no-sync, and the durable
		// store with --defer-commits (runtime/deferred.go).
		args := []string{"run", "app.yaml", "--drain", "--log-level", "warn"}
		switch attempt % 3 {
		case 1:
			args = append(args, "--no-sync")
		case 2:
			args = append(args, "--defer-commits")
		}
		cmd := cliCmd(t, dir, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		delay := time.Duration(20+rng.IntN(300)) * time.Millisecond
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d: %v\n%s", attempt, err, stderr.String())
			}
			t.Logf("run %d drained before its kill at %v, after %d kills: %d more lines", attempt, delay, kills, chunk)
			grow()
		case <-time.After(delay):
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			kills++
		}
	}
	// The last run drains to the end.
	cmd := cliCmd(t, dir, "run", "app.yaml", "--drain", "--no-sync", "--log-level", "warn")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("final run: %v\n%s", err, out)
	}

	s, err := runtime.OpenStore(filepath.Join(dir, ".flowrun", "crash"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, fl := range []string{"count"} {
		var total int64
		seen := map[string]int64{}
		err := s.View("crash", fl, func(r runtime.StateReader) error {
			var err error
			if total, err = r.Counters("n").Get([]byte("total")); err != nil {
				return err
			}
			it := r.Counters("seen").Scan(flowletScanAll)
			defer it.Close()
			for it.Next() {
				seen[string(it.Key())] = it.Count()
			}
			return it.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		if total != int64(len(want)) {
			t.Errorf("%s: total %d, want %d", fl, total, len(want))
		}
		for k, n := range seen {
			if n != 1 || !want[k] {
				t.Errorf("%s: %q counted %d times", fl, k, n)
			}
		}
		if len(seen) != len(want) {
			t.Errorf("%s: %d distinct lines counted, want %d", fl, len(seen), len(want))
		}
	}
	var dead []runtime.DeadLetter
	if err := s.DeadLetters("parse", 0, func(d runtime.DeadLetter) bool { dead = append(dead, d); return true }); err != nil {
		t.Fatal(err)
	}
	deadSet := map[string]int{}
	for _, d := range dead {
		deadSet[string(d.Payload)]++
	}
	if len(dead) != bad || len(deadSet) != bad {
		t.Errorf("dead letters: %d (%d distinct), want %d", len(dead), len(deadSet), bad)
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
	if n != len(want) || len(got) != len(want) {
		t.Errorf("sink file: %d lines, %d distinct, want %d", n, len(got), len(want))
	}
	for k, c := range got {
		if c != 1 || !want[k] {
			t.Errorf("sink file: %q %d times", k, c)
			break
		}
	}
	t.Logf("%d kills; %d lines, %d dead letters", kills, lines, bad)
}
