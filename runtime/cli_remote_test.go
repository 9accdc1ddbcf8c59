package runtime_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/cli"
	"github.com/flowrun/flowrun/runtime/cli/clitest"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

func runCLI(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, dir, args...)
}

// TestCLIStatusTopScale runs the CLI (the test binary) in a child process
// and talks to it with flowrun status, top and scale, found through the
// address file.
func TestCLIStatusTopScale(t *testing.T) {
	dir := t.TempDir()
	writeApp(t, dir, `
app: remote
flowlets:
  gen:
    type: generator
    config: {rate: 1000, batch: 50, payload: "{mod:5} {seq}", keys: {k: "{mod:5}"}}
  cnt:
    type: t_seq
connections:
  - {from: gen, to: cnt, strategy: hash, key: k}
`)
	// A non-loopback address without a token is refused before anything
	// opens.
	if code, _, errs := runCLI(t, dir, "run", "app.yaml", "--http", "0.0.0.0:0"); code != cli.ExitUsage || !strings.Contains(errs, "token") {
		t.Errorf("run on 0.0.0.0 without a token: exit %d, %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, ".flowrun")); err == nil {
		t.Error("the refused run created the data directory")
	}
	if code, _, errs := runCLI(t, dir, "status", "app.yaml"); code != cli.ExitFailure || !strings.Contains(errs, "not running") {
		t.Errorf("status of a stopped app: exit %d, %s", code, errs)
	}

	cmd := cliCmd(t, dir, "run", "app.yaml", "--progress", "never", "--no-sync", "--log-format", "json")
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
	}()
	addrFile := filepath.Join(dir, ".flowrun", "remote", httpapi.AddrFile)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if info, err := httpapi.ReadAddrFile(filepath.Dir(addrFile)); err == nil && info.URL != "" {
			if info.PID != cmd.Process.Pid || info.TokenRequired {
				t.Errorf("address file: %+v", info)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no address file; logs:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var st runtime.Status
	for time.Now().Before(deadline) {
		code, out, errs := runCLI(t, dir, "status", "app.yaml", "--json")
		if code != 0 {
			t.Fatalf("status --json: exit %d %s", code, errs)
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		if st.Ready && flowletStatus(st, "cnt").Processed > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.App != "remote" || !st.Ready {
		t.Fatalf("status: %+v", st)
	}
	code, out, errs := runCLI(t, dir, "status", "remote") // by app name
	if code != 0 || !strings.Contains(out, "FLOWLET") || !strings.Contains(out, "gen.out") || !strings.Contains(out, "gen → cnt") || !strings.Contains(out, "running") {
		t.Errorf("status: exit %d\n%s\n%s", code, out, errs)
	}
	t.Logf("flowrun status:\n%s", out)
	if code, out, errs := runCLI(t, dir, "scale", "app.yaml", "cnt", "3"); code != 0 || !strings.Contains(out, "cnt: 1 → 3 instances") {
		t.Errorf("scale: exit %d %q %s", code, out, errs)
	}
	if code, _, errs := runCLI(t, dir, "scale", "app.yaml", "gen", "3"); code != cli.ExitFailure || !strings.Contains(errs, "source") {
		t.Errorf("scale a source: exit %d %s", code, errs)
	}
	if code, _, _ := runCLI(t, dir, "scale", "app.yaml", "cnt", "zero"); code != cli.ExitUsage {
		t.Errorf("scale to zero: exit %d", code)
	}
	code, out, errs = runCLI(t, dir, "top", "app.yaml", "-n", "2", "--interval", "100ms")
	if code != 0 || strings.Count(out, "FLOWLET") != 2 || !hasRow(out, "cnt", "t_seq", "3") {
		t.Errorf("top: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := runCLI(t, dir, "scale", "app.yaml", "cnt", "1", "--json"); code != 0 || !strings.Contains(out, `"previous": 3`) {
		t.Errorf("scale --json: %d %s", code, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("run exited: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not stop on SIGTERM")
	}
	if _, err := os.Stat(addrFile); err == nil {
		t.Error("address file left after exit")
	}
	// JSON logs carry app, flowlet and instance.
	found := false
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil {
			continue
		}
		if m["msg"] == "scaled" && m["app"] == "remote" && m["flowlet"] == "cnt" {
			found = true
		}
	}
	if !found {
		t.Errorf("no JSON log of the scale with app and flowlet:\n%s", logs.String())
	}
}

// hasRow reports whether a line of out starts with the fields want.
func hasRow(out string, want ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= len(want) && strings.Join(f[:len(want)], " ") == strings.Join(want, " ") {
			return true
		}
	}
	return false
}
