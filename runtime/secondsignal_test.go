package runtime_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
)

// stuck counts its events, but when FLOWRUN_TEST_STUCK names a file that
// does not exist yet it creates it and then never returns, ignoring its
// context: user code (or a plugin) that hangs.
type stuck struct{}

func (stuck) Process(ctx flowlet.Context, ev flowlet.Event) error {
	if mark := os.Getenv("FLOWRUN_TEST_STUCK"); mark != "" {
		if f, err := os.OpenFile(mark, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			f.Close()
			<-make(chan struct{})
		}
	}
	return ctx.Counters("n").Add([]byte("total"), 1)
}

func init() {
	flowlet.Register("t_stuck", func() flowlet.Flowlet { return stuck{} }, flowlet.TypeInfo{Sink: true})
}

// TestSecondSignalExits: a first SIGTERM stops cleanly, which waits for the
// step in flight, and a step stuck in user code would hold the run until
// --step-timeout (an hour here). The second SIGTERM exits at once with
// 128+15, and the next run loses and repeats nothing.
func TestSecondSignalExits(t *testing.T) {
	if testing.Short() {
		t.Skip("child process")
	}
	dir := t.TempDir()
	writeApp(t, dir, `
app: sig2
flowlets:
  gen: {type: generator, config: {count: 400}}
  s: {type: t_stuck, batch_size: 10}
connections:
  - {from: gen, to: s}
`)
	mark := filepath.Join(dir, "stuck")
	cmd := cliCmd(t, dir, "run", "app.yaml", "--no-sync", "--step-timeout", "1h", "--log-level", "info")
	cmd.Env = append(cmd.Env, "FLOWRUN_TEST_STUCK="+mark)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopping := make(chan struct{})
	var logs strings.Builder
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if !seen && strings.Contains(sc.Text(), "a second signal exits at once") {
				seen = true
				close(stopping)
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { <-scanned; exited <- cmd.Wait() }()
	fail := func(format string, args ...any) {
		t.Helper()
		cmd.Process.Kill()
		<-exited
		t.Fatalf(format+"\n%s", append(args, logs.String())...)
	}
	// The deadlines below only guard against a hang.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fail("the step never got stuck")
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-stopping:
	case err := <-exited:
		t.Fatalf("the first SIGTERM ended the run (%v) with a step stuck\n%s", err, logs.String())
	case <-time.After(60 * time.Second):
		fail("the first SIGTERM was not acknowledged")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Fatalf("second SIGTERM: exit %v, want status %d\n%s", err, 128+int(syscall.SIGTERM), logs.String())
		}
	case <-time.After(60 * time.Second):
		fail("the second SIGTERM did not end the run")
	}
	if out, err := cliCmd(t, dir, "run", "app.yaml", "--drain", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	out, err := cliCmd(t, dir, "state", "get", "sig2", "s", "n", "total").Output()
	if err != nil || strings.TrimSpace(string(out)) != "400" {
		t.Fatalf("state get: %q %v, want 400", out, err)
	}
}
