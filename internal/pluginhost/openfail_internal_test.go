package pluginhost

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// TestOpenFailureStopsKeepFresh: when the built binary cannot be linked
// (the cache on another file system), Open keeps the cache entry fresh
// while the plugin is open; an Open that then fails (here the handshake)
// must stop that goroutine too, not leave it touching the entry forever.
func TestOpenFailureStopsKeepFresh(t *testing.T) {
	link := linkFile
	linkFile = func(string, string) error { return errors.New("invalid cross-device link") }
	defer func() { linkFile = link }()
	before := keepFreshRunning()
	_, err := Open(context.Background(), "future", "badversion", "testdata", Options{CacheDir: t.TempDir()})
	var he *HandshakeError
	if !errors.As(err, &he) {
		t.Fatalf("Open: %v, want a *HandshakeError", err)
	}
	if n := keepFreshRunning(); n != before {
		t.Fatalf("%d keepFresh goroutines after a failed Open, %d before", n, before)
	}
}

// keepFreshRunning counts the goroutines in keepFresh (stopping one waits
// for it to return).
func keepFreshRunning() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "pluginhost.keepFresh(")
		}
		buf = make([]byte, 2*len(buf))
	}
}
