package pluginhost_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet/flowlettest"
	"github.com/flowrun/flowrun/internal/pluginhost"
)

// Long enough to tell "returned on time" from "waited for the scripts'
// 60s sleep", whatever the load.
const notAfter = 45 * time.Second

// readPID waits for a script to write its child's pid to file.
func readPID(t *testing.T, file string) int {
	t.Helper()
	for end := time.Now().Add(notAfter); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(file)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
	}
	t.Fatalf("no pid in %s", file)
	return 0
}

// waitGone fails the test unless process pid ends (a zombie waiting for
// its new parent to reap it has ended) within a few seconds.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
				return
			}
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("the child process %d still runs", pid)
}

// openAsync runs Open and fails the test if it does not return before the
// scripts' children would have ended on their own.
func openAsync(t *testing.T, ctx context.Context, name, path string, o pluginhost.Options) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		p, err := pluginhost.Open(ctx, name, path, "testdata", o)
		if p != nil {
			p.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(notAfter):
		t.Fatal("Open still waits: for the plugin's child, which holds its stdout")
		return nil
	}
}

// TestStartTimeoutChild: a "plugin" that never shakes hands and whose child
// holds its stdout fails at the start timeout, not when the child ends,
// and the child is killed with it.
func TestStartTimeoutChild(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	o := options(t, nil)
	o.StartTimeout = time.Second
	o.Env = []string{"SLEEPER_PIDFILE=" + pidFile}
	err := openAsync(t, context.Background(), "sleeper", "scripts/sleeper.sh", o)
	var he *pluginhost.HandshakeError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "no handshake within 1s") {
		t.Fatalf("want a HandshakeError for the timeout, got %v", err)
	}
	waitGone(t, readPID(t, pidFile))
}

// TestStartCancelled: cancelling Open's context ends a handshake in
// progress (long before the start timeout) and kills the process group.
func TestStartCancelled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	o := options(t, nil)
	o.StartTimeout = 10 * time.Minute
	o.Env = []string{"SLEEPER_PIDFILE=" + pidFile}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		readPID(t, pidFile)
		cancel()
	}()
	err := openAsync(t, ctx, "sleeper", "scripts/sleeper.sh", o)
	var se *pluginhost.StartError
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) {
		t.Fatalf("want a StartError for the cancelled context, got %v", err)
	}
	waitGone(t, readPID(t, pidFile))
}

// TestBuildCancel: cancelling the context stops a build at once, with the
// processes the go command started (here the fake go's sleep, in a real
// build the compilers), and the start of the build is logged.
func TestBuildCancel(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	t.Setenv("SLOWGO_PIDFILE", pidFile)
	goCmd, err := filepath.Abs("testdata/scripts/slowgo.sh")
	if err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	o := options(t, &logs)
	o.GoCommand = goCmd
	o.CacheDir = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := pluginhost.Build(ctx, "slow", t.TempDir(), o)
		done <- err
	}()
	pid := readPID(t, pidFile)
	cancel()
	select {
	case err = <-done:
	case <-time.After(notAfter):
		t.Fatal("Build still waits for the go command's child")
	}
	var be *pluginhost.BuildError
	if !errors.As(err, &be) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "build interrupted") {
		t.Fatalf("want a BuildError for the cancelled context, got %v", err)
	}
	waitGone(t, pid)
	if l := logs.String(); !strings.Contains(l, `level=INFO msg="building plugin" flowlet=slow`) ||
		!strings.Contains(l, "cache="+o.CacheDir) || !strings.Contains(l, `msg="plugin build failed"`) {
		t.Errorf("logs:\n%s", l)
	}
}

// TestBuildNoModule: a plugin outside any module, or whose go.mod lacks
// flowrun, gets a message saying how to set its module up.
func TestBuildNoModule(t *testing.T) {
	src, err := os.ReadFile("testdata/testplugin/main.go")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "outside")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = pluginhost.Build(context.Background(), "outside", dir, options(t, nil))
	var be *pluginhost.BuildError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "no go.mod") ||
		!strings.Contains(err.Error(), "go mod init example.com/outside") || !strings.Contains(err.Error(), "-replace=github.com/flowrun/flowrun=") {
		t.Fatalf("want a BuildError saying how to make a module, got %v", err)
	}
	t.Log(err)

	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/outside\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = pluginhost.Build(context.Background(), "outside", dir, options(t, nil))
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "does not require flowrun") ||
		!strings.Contains(err.Error(), "-require=github.com/flowrun/flowrun@v0.0.0") {
		t.Fatalf("want a BuildError saying how to require flowrun, got %v", err)
	}
	t.Log(err)
}

// TestCloseDuringInstanceStart: a Plugin closed while an instance's
// process is starting (here in the plugin's Init) kills that process once
// the start returns, instead of handing it to the instance after Close
// (nothing would kill it then); the instance's Init fails.
func TestCloseDuringInstanceStart(t *testing.T) {
	dir := t.TempDir()
	started, gate := filepath.Join(dir, "started"), filepath.Join(dir, "gate")
	for _, fifo := range []string{started, gate} {
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := pluginhost.Open(context.Background(), "late", "testplugin", "testdata", options(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	f := p.New()
	initErr := make(chan error, 1)
	go func() {
		initErr <- flowlettest.New("late").Init(f, map[string]any{"init_started": started, "init_gate": gate})
	}()
	b, err := os.ReadFile(started) // the plugin is in Init
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	if err := os.WriteFile(gate, nil, 0); err != nil { // Init may return
		t.Fatal(err)
	}
	if err := <-initErr; err == nil {
		t.Error("an instance started on a closed plugin")
	}
	if got := f.(interface{ PID() int }).PID(); got != 0 {
		t.Errorf("the instance holds process %d after Close", got)
	}
	waitGone(t, pid)
}
