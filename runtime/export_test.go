package runtime

import (
	"context"
	"testing"
)

// RunInBackground runs a until the test ends, then stops it (Run must
// return nil); it returns Run's context.
func RunInBackground(t testing.TB, a *App) context.Context { return runInBackground(t, a) }

// SetFreeBytes replaces the free-space probe of the disk reserve
// (diskspace.go) and returns the undo. Call it while no app runs.
func SetFreeBytes(f func(dir string) (free, size int64, err error)) (undo func()) {
	old := freeBytes
	freeBytes = f
	return func() { freeBytes = old }
}
