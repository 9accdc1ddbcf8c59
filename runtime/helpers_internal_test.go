package runtime

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/planner"
)

// openYAML plans the app file text yaml and opens it (not running) on a
// data directory of its own (opts.DataDir, if empty); the app is closed
// when the test ends.
func openYAML(t *testing.T, yaml string, opts Options) *App {
	t.Helper()
	p, dir := planYAML(t, yaml)
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(dir, "data")
	}
	a, err := Open(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// planYAML plans the app file text yaml, written to a directory of its own
// (returned).
func planYAML(t *testing.T, yaml string) (*planner.Plan, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "app.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return p, dir
}

// runInBackground runs a until the test ends, then stops it (Run must
// return nil), and returns Run's context.
func runInBackground(t testing.TB, a *App) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return ctx
}

// pollUntil polls cond until it holds; a minute without fails the test
// (a hang detector, not a timing assertion).
func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	hang := time.After(time.Minute)
	for !cond() {
		select {
		case <-hang:
			t.Fatalf("no %s in a minute", what)
		case <-time.After(time.Millisecond):
		}
	}
}
