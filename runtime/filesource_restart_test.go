package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestFileSourceFollowAppendWhileStopped: lines appended to a followed file
// while the app is stopped (after a run that read it to its end, after one
// stopped in the middle, after one that saw a partial last line) are each
// emitted exactly once by the next run: the committed position's
// fingerprint covers only the bytes before the offset, so an append does
// not make the next run take the file for another one (re-read it from the
// start) or skip anything.
func TestFileSourceFollowAppendWhileStopped(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	var want []string
	next := 0
	lines := func(n int) string {
		var b strings.Builder
		for range n {
			s := fmt.Sprintf("line-%05d", next)
			next++
			want = append(want, s)
			b.WriteString(s + "\n")
		}
		return b.String()
	}
	appendFile := func(s string) {
		t.Helper()
		f, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	p := plan(t, dir, `
app: t
flowlets:
  src: {type: file_source, config: {path: `+input+`, follow: true, lines_per_step: 7}}
  c: {type: t_count}
connections:
  - {from: src, to: c}
`)
	opts := runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data"), IdleWait: 2 * time.Millisecond}
	// run runs the app until the counter reaches at least atLeast (and,
	// when exact, exactly want's length), then stops it.
	run := func(atLeast int, exact bool) {
		t.Helper()
		a, err := runtime.Open(p, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		deadline := time.Now().Add(time.Minute) // a hang detector
		for {
			n := counter(t, a, "c", "n", "total")
			if n >= int64(atLeast) {
				if exact {
					// idle: nothing more to come
					st := a.Status()
					if flowletStatus(st, "src").Busy == 0 && flowletStatus(st, "c").Busy == 0 && counter(t, a, "c", "n", "total") == n {
						break
					}
				} else {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("total %d, want %d", n, atLeast)
			}
			time.Sleep(2 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	}
	appendFile(lines(50))
	run(50, true)
	appendFile(lines(30)) // while stopped, after a run that read to the end
	run(80, true)
	appendFile(lines(5000))
	run(100, false)       // stopped somewhere in the middle
	appendFile(lines(20)) // while stopped
	appendFile("partial")
	run(len(want), true)
	appendFile("-done\n" + lines(3)) // the partial line completed while stopped
	want = append(want, "partial-done")
	run(len(want), true)

	a, err := runtime.Open(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if n := counter(t, a, "c", "n", "total"); n != int64(len(want)) {
		t.Errorf("%d lines emitted, %d written", n, len(want))
	}
	for _, s := range want {
		if n := counter(t, a, "c", "seen", s); n != 1 {
			t.Errorf("line %q emitted %d times", s, n)
		}
	}
}
