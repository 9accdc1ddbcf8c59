package runtime_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// rmw increments one table key by read-modify-write: concurrent instances
// conflict on it, and every conflict must be retried, never lost.
type rmw struct{}

func (rmw) Process(ctx flowlet.Context, ev flowlet.Event) error {
	t := ctx.State("sum")
	v, _, err := t.Get([]byte("k"))
	if err != nil {
		return err
	}
	var n uint64
	if len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return t.Put([]byte("k"), binary.BigEndian.AppendUint64(nil, n+1))
}

// slow sleeps in every event until the step's context is cancelled or 2ms
// passed, to keep steps in flight when the app is stopped.
type slow struct{}

func (slow) Process(ctx flowlet.Context, ev flowlet.Event) error {
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Millisecond):
	}
	return ctx.Counters("n").Add([]byte("total"), 1)
}

func init() {
	flowlet.Register("t_rmw", func() flowlet.Flowlet { return rmw{} }, flowlet.TypeInfo{Sink: true})
	flowlet.Register("t_slow", func() flowlet.Flowlet { return slow{} }, flowlet.TypeInfo{Sink: true})
}

func TestConflictRetry(t *testing.T) {
	dir := t.TempDir()
	a := runDrain(t, dir, `
app: t
flowlets:
  gen: {type: generator, instances: 2, config: {count: 2000}}
  sum: {type: t_rmw, instances: 4, batch_size: 5}
connections:
  - {from: gen, to: sum, strategy: round_robin}
`, runtime.Options{NoSync: true})
	defer a.Close()
	var got uint64
	a.View("sum", func(r runtime.StateReader) error {
		v, _, err := r.Table("sum").Get([]byte("k"))
		got = binary.BigEndian.Uint64(v)
		return err
	})
	if got != 2000 {
		t.Errorf("sum = %d, want 2000", got)
	}
	st := a.Status()
	var conflicts uint64
	for _, f := range st.Flowlets {
		conflicts += f.Conflicts
	}
	if conflicts == 0 || st.Tx.Conflicts == 0 {
		t.Errorf("no conflicts among 4 instances writing one key: %+v", st.Tx)
	}
	t.Logf("%d conflicts retried", conflicts)
}

func TestEmitErrorsAreFailures(t *testing.T) {
	// t_count emits on a hash queue without its key and ignores the error:
	// the event must still fail (and reach the DLQ), not vanish.
	dir := t.TempDir()
	a := runDrain(t, dir, `
app: t
flowlets:
  gen: {type: generator, config: {count: 3}}
  mid: {type: t_count, retries: {max: 0}, config: {emit: true, ignore_emit_err: true}}
  cnt: {type: t_count}
connections:
  - {from: gen, to: mid}
  - {from: mid, to: cnt, strategy: hash, key: p}
`, runtime.Options{NoSync: true})
	if n := counter(t, a, "cnt", "n", "total"); n != 0 {
		t.Errorf("cnt got %d events", n)
	}
	if n := counter(t, a, "mid", "n", "total"); n != 0 {
		t.Errorf("failed events' counter writes committed: %d", n)
	}
	a.Close()
	dl := deadLetters(t, filepath.Join(dir, "data"), "mid")
	if len(dl) != 3 || !strings.Contains(dl[0].Error, `without partition key "p"`) {
		t.Fatalf("dead letters: %+v", dl)
	}
}

func TestStateWriteErrorsAreFailures(t *testing.T) {
	// t_count makes a state write that fails (a key over MaxKeySize) and
	// ignores the error: the event must fail (and reach the DLQ) as with a
	// failed Emit, not commit with a write missing.
	for _, op := range []string{"put", "delete", "add"} {
		t.Run(op, func(t *testing.T) { checkIgnoredStateErrorFails(t, op, "key") })
	}
}

func TestStateScanErrorsAreFailures(t *testing.T) {
	// t_count scans a table (or counters) of a bad name and ignores the
	// iterator's Err: the event must fail, as for a failed Get, not
	// commit writes computed from a scan that failed (no keys).
	for _, op := range []string{"scan", "count_scan"} {
		t.Run(op, func(t *testing.T) { checkIgnoredStateErrorFails(t, op, flowlet.ErrInvalidName.Error()) })
	}
}

// checkIgnoredStateErrorFails runs three events through t_count's bad_write
// op, whose error it ignores: none of their writes may commit, and each is
// dead-lettered with an error saying wantErr.
func checkIgnoredStateErrorFails(t *testing.T, op, wantErr string) {
	t.Helper()
	dir := t.TempDir()
	a := runDrain(t, dir, `
app: t
flowlets:
  gen: {type: generator, config: {count: 3}}
  mid: {type: t_count, retries: {max: 0}, config: {bad_write: `+op+`}}
connections:
  - {from: gen, to: mid}
`, runtime.Options{NoSync: true})
	if n := counter(t, a, "mid", "n", "total"); n != 0 {
		t.Errorf("failed events' counter writes committed: %d", n)
	}
	a.Close()
	dl := deadLetters(t, filepath.Join(dir, "data"), "mid")
	if len(dl) != 3 || !strings.Contains(dl[0].Error, wantErr) {
		t.Fatalf("dead letters: %+v, want 3 saying %q", dl, wantErr)
	}
}

func TestRestartResumes(t *testing.T) {
	// Stop a run mid-way (context cancelled while steps are in flight), then
	// run again to the end: every event counted exactly once.
	dir := t.TempDir()
	yaml := `
app: t
flowlets:
  gen: {type: generator, config: {count: 900, rate: 1500}}
  s: {type: t_slow, instances: 3, batch_size: 20}
connections:
  - {from: gen, to: s}
`
	opts := runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")}
	for run := 0; run < 3; run++ {
		a, err := runtime.Open(plan(t, dir, yaml), opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		err = a.Run(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	a := runDrain(t, dir, yaml, opts)
	defer a.Close()
	if n := counter(t, a, "s", "n", "total"); n != 900 {
		t.Errorf("total after restarts = %d, want 900", n)
	}
	if st := a.TxStats(); st.Invalidated != 0 {
		t.Logf("invalidated (recovered in-progress): %d", st.Invalidated)
	}
}

// TestSIGTERMMidStep stops a run with SIGTERM while its steps are in flight
// (t_slow holds each event 2ms), twice: each run exits 0, and a drain after
// them counts every event once.
func TestSIGTERMMidStep(t *testing.T) {
	if testing.Short() {
		t.Skip("child process")
	}
	dir := t.TempDir()
	writeApp(t, dir, `
app: sig
flowlets:
  gen: {type: generator, config: {count: 1500, rate: 3000}}
  s: {type: t_slow, instances: 2, batch_size: 50}
connections:
  - {from: gen, to: s}
`)
	for i := 0; i < 2; i++ {
		cmd := cliCmd(t, dir, "run", "app.yaml", "--no-sync", "--log-level", "warn")
		var out bytes.Buffer
		cmd.Stderr = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		// Not a fixed sleep: a SIGTERM that comes before the run installed
		// its handler kills the process (the default action), and a busy
		// machine can take longer than any sleep to start the binary.
		waitRunReady(t, filepath.Join(dir, ".flowrun", "sig"), cmd, exited, &out)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := <-exited; err != nil {
			t.Fatalf("run %d: SIGTERM: exit %v, want 0\n%s", i, err, out.String())
		}
	}
	if out, err := cliCmd(t, dir, "run", "app.yaml", "--drain", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	out, err := cliCmd(t, dir, "state", "get", "sig", "s", "n", "total").Output()
	if err != nil || strings.TrimSpace(string(out)) != "1500" {
		t.Fatalf("state get: %q %v", out, err)
	}
}

// waitRunReady waits until the flowrun run started as cmd serves its HTTP
// API from data (so its signal handler is installed) and reports every
// instance started (GET /ready). exited gets cmd.Wait's result; logs, the
// run's stderr, is read only once the run has exited. The deadline only
// guards against a hang.
func waitRunReady(t *testing.T, data string, cmd *exec.Cmd, exited <-chan error, logs *bytes.Buffer) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			t.Fatalf("run exited before it was ready: %v\n%s", err, logs.String())
		default:
		}
		if info, err := httpapi.ReadAddrFile(data); err == nil && info.PID == cmd.Process.Pid {
			c := &httpapi.Client{URL: info.URL}
			var r httpapi.ReadyJSON
			if err := c.Do(t.Context(), http.MethodGet, "/ready", nil, &r); err == nil && r.Ready {
				return
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-exited
			t.Fatalf("run not ready after 60 s\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An app with nothing to do (a followed file that does not grow, consumers
// with empty queues) stays under 5% of a core: idle consumers wait for
// wake-ups, the queue backend's writeback loop and the coordinator's expiry
// sweeper park, eviction passes over unchanged queues read nothing. What is
// left is Badger's compactor ticks and the file source's poll.
func TestIdleAppUsesNoCPU(t *testing.T) {
	dir := t.TempDir()
	opts := runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")}
	input := filepath.Join(dir, "in.txt")
	os.WriteFile(input, []byte("a\nb\n"), 0o644)
	a := runApp(t, plan(t, dir, `
app: t
flowlets:
  src: {type: file_source, config: {path: `+input+`, follow: true}}
  a: {type: t_count, instances: 4, config: {emit: true}}
  b: {type: t_count, instances: 4}
connections:
  - {from: src, to: a}
  - {from: a, to: b}
`), opts)
	deadline := time.Now().Add(time.Minute) // a hang detector
	for counter(t, a, "b", "n", "total") != 2 {
		if time.Now().After(deadline) {
			t.Fatal("events did not arrive")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Settled: no instance in a step or about to start one (the last empty
	// dequeues and the source's idle step are done).
	for {
		busy := 0
		for _, f := range a.Status().Flowlets {
			busy += f.Busy
		}
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app did not settle: %+v", a.Status().Flowlets)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The least of three one-second windows: the app's own floor. Other
	// test binaries share the machine's two cores (go test runs packages in
	// parallel), and a window they crowd runs the same wake-ups slower.
	share, used := 1.0, time.Duration(0)
	for range 3 {
		before := cpuTime()
		wall := time.Now()
		time.Sleep(time.Second)
		u := cpuTime() - before
		if s := float64(u) / float64(time.Since(wall)); s < share {
			share, used = s, u
		}
	}
	t.Logf("idle app: %v CPU in its quietest second (%.2f%% of a core)", used, 100*share)
	if share > 0.05 {
		t.Errorf("idle app used %.1f%% of a core (%v in its quietest second)", 100*share, used)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A generator's positions hold only under the instance count they were
// written with (instance i of n emits i, i+n, …): a run with another count
// stops the source with an error naming both counts, and emits nothing; the
// run does not count as drained.
func TestGeneratorRefusesNewInstanceCount(t *testing.T) {
	dir := t.TempDir()
	app := func(instances int) string {
		return fmt.Sprintf(`
app: t
flowlets:
  gen: {type: generator, instances: %d, config: {count: 100}}
  c: {type: t_count}
connections:
  - {from: gen, to: c}
`, instances)
	}
	a := runDrain(t, dir, app(1), runtime.Options{NoSync: true})
	if n := counter(t, a, "c", "n", "total"); n != 100 {
		t.Fatalf("first run: total %d, want 100", n)
	}
	a.Close()
	for _, instances := range []int{2, 1} {
		b, err := runtime.Open(plan(t, dir, app(instances)), runtime.Options{NoSync: true, Drain: true, DataDir: filepath.Join(dir, "data")})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err = b.Run(ctx)
		cancel()
		if instances == 2 && (err == nil || !strings.Contains(err.Error(), "written with instances: 1, and this run has 2")) {
			t.Fatalf("run with 2 instances: %v, want the instance-count error", err)
		}
		if drained := b.Status().Drained; drained != (instances == 1) {
			t.Errorf("instances %d: status says drained: %v (a source that gave up did not reach its end)", instances, drained)
		}
		if instances == 1 && err != nil {
			t.Fatalf("run with the original count again: %v", err)
		}
		if n := counter(t, b, "c", "n", "total"); n != 100 {
			t.Fatalf("instances %d: total %d, want 100 (nothing emitted twice)", instances, n)
		}
		b.Close()
	}
}

// The retry budget is the event's, not the instance's: with fifo, where any
// instance may take an event another one failed, a poison event is tried
// retries.max + 1 times in all and then dead-lettered (a user saw 5 attempts
// for retries.max 2 with 2 instances).
func TestRetryBudgetSharedByInstances(t *testing.T) {
	dir := t.TempDir()
	a := runDrain(t, dir, `
app: t
flowlets:
  gen: {type: generator, config: {count: 10}}
  c: {type: t_count, instances: 2, batch_size: 1, retries: {max: 2, backoff: 5ms}, config: {fail: "event 7"}}
connections:
  - {from: gen, to: c, strategy: fifo}
`, runtime.Options{NoSync: true})
	defer a.Close()
	var failed uint64
	for _, f := range a.Status().Flowlets {
		if f.Name == "c" {
			failed = f.Failed
		}
	}
	dls, err := a.Inspect().DeadLetterList([]string{"c"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if failed != 3 || len(dls) != 1 || dls[0].Attempts != 3 {
		t.Fatalf("failed %d times, %d dead letters (%+v); want 3 attempts in all and one dead letter saying 3", failed, len(dls), dls)
	}
}
