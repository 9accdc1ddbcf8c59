package pluginhost

import (
	"os"
	"path/filepath"
	"testing"
)

// A relative plugin path next to an app file given relative to the working
// directory must still be a path, never a bare name exec looks up in PATH.
func TestResolveIsAbsolute(t *testing.T) {
	got := Resolve("x.py", ".")
	wd, _ := os.Getwd()
	if got != filepath.Join(wd, "x.py") {
		t.Fatalf("Resolve = %q, want %q", got, filepath.Join(wd, "x.py"))
	}
	if got := Resolve("/opt/p", "app"); got != "/opt/p" {
		t.Fatalf("absolute path changed: %q", got)
	}
}
