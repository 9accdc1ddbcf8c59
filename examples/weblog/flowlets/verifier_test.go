package flowlets

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// buildTool builds a command of the module (by running the go tool) into dir.
func buildTool(t testing.TB, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = "../../.." // module root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// TestAgainstVerifier parses a generated log with LineParser alone (no
// runtime) and has the independent verifier compare the results: the two
// implementations of the README rules must agree on every line.
func TestAgainstVerifier(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gen and verify")
	}
	dir := t.TempDir()
	gen := buildTool(t, dir, "./examples/weblog/gen")
	verify := buildTool(t, dir, "./examples/weblog/verify")
	for _, args := range [][]string{
		{"-lines", "100000", "-seed", "3", "-malformed", "0.05", "-crlf", "0.02", "-final-newline=false"},
		{"-lines", "30000", "-seed", "4", "-malformed", "0.5", "-start", "2024-02-28T22:30:00+05:30", "-span", "48h"},
	} {
		log := filepath.Join(dir, "access.log")
		if b, err := exec.Command(gen, append(args, "-out", log)...).CombinedOutput(); err != nil {
			t.Fatalf("gen: %v\n%s", err, b)
		}
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		r := NewResults()
		var p LineParser
		for len(data) > 0 {
			ln := data
			if i := bytes.IndexByte(data, '\n'); i >= 0 {
				ln, data = data[:i], data[i+1:]
			} else {
				data = nil
			}
			l, _, ok := p.Parse(ln)
			if !ok {
				r.Malformed++
				continue
			}
			r.PageViews[string(l.Path)]++
			r.Visitors[string(l.Host)]++
			r.StatusCounts[string(l.Status[:])]++
			r.BytesPerHour[string(l.Hour[:])] += l.Bytes
			r.LinesPerHour[string(l.Hour[:])]++
		}
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		res := filepath.Join(dir, "results.json")
		if err := os.WriteFile(res, js, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(verify, "-log", log, "-results", res).CombinedOutput()
		if err != nil {
			t.Fatalf("verify %v: %v\n%s", args, err, out)
		}
		t.Logf("%v: %s", args, bytes.TrimSpace(out))
	}
}
