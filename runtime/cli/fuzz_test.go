package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// FuzzArgs parses any command line with every command's body replaced by
// a no-op (they would open stores, run apps, dial addresses): flags,
// arguments and command names are checked as for real. No panic, and a
// command line that fails is a usage error (exit 2) with a message.
//
//	go test ./runtime/cli -run '^$' -fuzz FuzzArgs -fuzztime 1m
func FuzzArgs(f *testing.F) {
	for _, s := range []string{
		"", "--help", "run app.yaml --drain --progress never --memory-limit 0x1p30 --min-free-disk 1_000 --http :0",
		"run a.yaml --step-timeout=1x --progress-interval -1s --max-backlog 1e3", "queue tail app q -n -1 --partition 1,,x --from 3/0/1.0.0",
		"queue tial", "state scan app f t --prefix '' -n 99999999999999999999", "dlq ls app f --limit=", "top --interval 0 -n -5",
		"scale app f 3 --addr 127.0.0.1:1", "status --log-level loud --log-format xml", "plan --dot --json a.yaml", "types --json",
		"--data", "-", "--", "run -- -x", "queue tail app q --partition=9223372036854775808", "validate --store=maybe a",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		var out, errb bytes.Buffer
		g := &globals{stdout: &out, stderr: &errb}
		root := g.root()
		stubBodies(root)
		code := execute(root, args, strings.NewReader(""), &out, &errb)
		switch {
		case code == ExitOK:
		case code == ExitUsage && strings.HasPrefix(errb.String(), "flowrun: "):
		default:
			t.Fatalf("%q: exit %d\nstderr: %s", args, code, errb.String())
		}
	})
}

// stubBodies replaces the body of every runnable command under c with a
// no-op, keeping the groups' unknown-subcommand check.
func stubBodies(c *cobra.Command) {
	for _, sub := range c.Commands() {
		if sub.Runnable() && !sub.HasSubCommands() {
			sub.RunE = func(*cobra.Command, []string) error { return nil }
			sub.Run = nil
		}
		stubBodies(sub)
	}
}

// FuzzOfflineArgs runs the read-only offline commands for real, on a small
// store of an app run once, with any flags and arguments after the
// command: no panic (queue tail -n 5e18 crashed the CLI), and the exit
// code is one of the three.
func FuzzOfflineArgs(f *testing.F) {
	app, data := bigEvents(f, 3, 8, "clitest_reject")
	cmds := [][]string{
		{"queue", "tail", app, "sink.dlq"}, {"queue", "tail", "big", "gen.out"}, {"queue", "ls", app},
		{"dlq", "ls", "big"}, {"state", "get", app, "sink"}, {"state", "scan", app, "sink"}, {"plan", app},
	}
	for i, s := range []string{"", "-n 5000000000000000000", "--partition 0,63 --from 1/0/1.0.0 --to 9 --since 10m --until 2000-01-01T00:00:00Z",
		"-n 0 --json", "t k --counters", "--prefix a --start b -n 1", "--dot", "--limit 1 sink"} {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, which uint8, rest string) {
		args := append(append([]string(nil), cmds[int(which)%len(cmds)]...), strings.Fields(rest)...)
		// Last, so that it wins over one in rest: the store read is data.
		args = append(args, "--data", data)
		var out, errb bytes.Buffer
		if code := Run(args, strings.NewReader(""), &out, &errb); code < 0 || code > ExitUsage {
			t.Fatalf("%q: exit %d\n%s", args, code, errb.String())
		}
	})
}
