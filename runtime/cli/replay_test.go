package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

const rejectGraph = `
flowlets:
  gen: {type: generator, config: {count: 3}}
  sink: {type: clitest_reject, retries: {max: 0}}
connections:
  - {from: gen, to: sink}
`

// twoAppsOneStore drains app "one" (three events, each dead-lettered by
// sink) into its store, data, and writes app "two"'s file, other: the same
// flowlets under another name.
func twoAppsOneStore(t *testing.T) (data, other string) {
	_, data = drainedApp(t, "app: one"+rejectGraph)
	return data, writeApp(t, t.TempDir(), "other.yaml", "app: two"+rejectGraph)
}

// TestReplayRefusesOtherAppsStore: dlq replay writes to the store, and
// given another app's file (a wrong --data) it moved that store's dead
// letters through the file's inputs, exit 0, where a run refuses the
// store (runtime.ErrOtherApp). It now refuses too, and changes nothing.
func TestReplayRefusesOtherAppsStore(t *testing.T) {
	data, other := twoAppsOneStore(t)
	code, stdout, stderr := runCLI2(t, "dlq", "replay", "--data", data, other, "sink")
	if code != ExitFailure || stdout != "" || !strings.Contains(stderr, "another app") {
		t.Errorf("dlq replay of app two on app one's store: exit %d, want 1 naming the other app\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI2(t, "dlq", "ls", "--data", data, "one", "sink")
	if code != 0 || strings.Count(stdout, "\n") != 3 {
		t.Errorf("dlq ls after the refused replay: exit %d, want the 3 dead letters still there\n%s%s", code, stdout, stderr)
	}
	// The app's own file replays.
	own := writeApp(t, filepath.Dir(other), "one.yaml", "app: one"+rejectGraph)
	if code, out := runCLI(t, "dlq", "replay", "--data", data, own, "sink"); code != 0 || !strings.Contains(out, "replayed 3") {
		t.Errorf("dlq replay of its own app: exit %d\n%s", code, out)
	}
}

// Reads name whose store they read: one app's store given (--data) with
// another app's name or file answered as if that app had nothing ("no
// state", an empty DLQ: exit 0), and a queue tail listed the other app's
// events under its name.
func TestReadsRefuseOtherAppsStore(t *testing.T) {
	data, other := twoAppsOneStore(t)
	for _, args := range [][]string{
		{"dlq", "ls", "--data", data, "two", "sink"},
		{"dlq", "ls", "--data", data, other, "sink"},
		{"queue", "ls", "--data", data, "two"},
		{"queue", "tail", "--data", data, "two", "gen.out"},
		{"state", "get", "--data", data, "two", "sink", "t"},
	} {
		code, stdout, stderr := runCLI2(t, args...)
		if code != ExitFailure || stdout != "" || !strings.Contains(stderr, `app "one"`) {
			t.Errorf("%v: exit %d, want 1 naming app one\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
	}
	if code, stdout, stderr := runCLI2(t, "dlq", "ls", "--data", data, "one", "sink"); code != 0 || strings.Count(stdout, "\n") != 3 {
		t.Errorf("dlq ls of the store's own app: exit %d\n%s%s", code, stdout, stderr)
	}
}
