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
