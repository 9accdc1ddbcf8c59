package cli

import (
	"strings"
	"testing"
)

// TestTailBadSelection: a partition the queue does not have is a bad
// --partition (exit 2, as a malformed one is, and the HTTP API's 400); it
// exited 1 with the queue package's "invalid configuration", naming
// neither the flag nor the queue. An unknown queue lists the app's queues.
func TestTailBadSelection(t *testing.T) {
	app, data := drainedApp(t, `app: tails
flowlets:
  gen: {type: generator, config: {count: 3}}
  cnt: {type: clitest_counts}
connections:
  - {from: gen, to: cnt, partitions: 4}
`)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"gen.out", "--partition", "4"}, ExitUsage, []string{"--partition", "partition 4 not in [0, 4)", `queue "gen.out" has 4 partitions`}},
		{[]string{"gen.out", "--partition", "1,-1"}, ExitUsage, []string{"--partition", "partition -1"}},
		{[]string{"gen.ot"}, ExitFailure, []string{`no queue "gen.ot"`, "gen.out", "cnt.dlq"}},
	} {
		args := append([]string{"queue", "tail", "--data", data, app}, tc.args...)
		code, stdout, stderr := runCLI2(t, args...)
		if code != tc.code || stdout != "" {
			t.Errorf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", tc.args, code, tc.code, stdout, stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, stderr, w)
			}
		}
	}
	if code, out := runCLI(t, "queue", "tail", "--data", data, app, "gen.out", "--partition", "0,1,2,3", "-n", "0"); code != 0 || strings.Count(out, "\n") != 3 {
		t.Errorf("tail of every partition: exit %d, want the 3 events\n%s", code, out)
	}
}
