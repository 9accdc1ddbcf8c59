package pluginhost

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTrimCache: entries unused for longer than the age go, at most once a
// day; the entry in use, recent ones, one with a build running and anything
// not named like a key stay.
func TestTrimCache(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	// entry makes a key directory whose files were last modified at the
	// given times, the directory itself at the oldest.
	entry := func(name string, ages ...time.Duration) string {
		t.Helper()
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		oldest := now
		for i, age := range ages {
			f := filepath.Join(d, []string{"plugin", ".plugin.tmp-1"}[i])
			if err := os.WriteFile(f, []byte("x"), 0o755); err != nil {
				t.Fatal(err)
			}
			at := now.Add(-age)
			if err := os.Chtimes(f, at, at); err != nil {
				t.Fatal(err)
			}
			if at.Before(oldest) {
				oldest = at
			}
		}
		if err := os.Chtimes(d, oldest, oldest); err != nil {
			t.Fatal(err)
		}
		return d
	}
	const day = 24 * time.Hour
	old := entry(strings.Repeat("a", 32), 6*day)
	recent := entry(strings.Repeat("b", 32), 3*day)
	inUse := entry(strings.Repeat("c", 32), 9*day)
	building := entry(strings.Repeat("d", 32), 7*day, time.Minute) // a binary and a build's temporary file
	notKey := entry("not-a-key-but-old", 30*day)
	upper := entry(strings.Repeat("A", 32), 30*day)

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	trimCache(dir, inUse, 5*day, now, log)
	exists := func(d string) bool { _, err := os.Stat(d); return err == nil }
	if exists(old) {
		t.Error("an entry unused for 6 days stayed")
	}
	for _, d := range []string{recent, inUse, building, notKey, upper} {
		if !exists(d) {
			t.Errorf("%s was removed", filepath.Base(d))
		}
	}
	if !strings.Contains(logs.String(), `msg="plugin cache trimmed"`) || !strings.Contains(logs.String(), "removed=1") {
		t.Errorf("log: %s", logs.String())
	}

	// At most once a day: an hour later the next old entry stays, a day
	// later it goes.
	later := entry(strings.Repeat("e", 32), 8*day)
	trimCache(dir, "", 5*day, now.Add(time.Hour), log)
	if !exists(later) {
		t.Error("a second trim ran within a day")
	}
	trimCache(dir, "", 5*day, now.Add(25*time.Hour), log)
	if exists(later) || exists(inUse) {
		t.Error("the trim a day later left entries unused for more than 5 days")
	}
	if !exists(recent) {
		t.Error("an entry used 3 days before the first trim (4 days before the second) went")
	}

	// A negative age keeps everything.
	kept := entry(strings.Repeat("f", 32), 100*day)
	trimCache(dir, "", -1, now.Add(30*day), log)
	if !exists(kept) {
		t.Error("CacheMaxAge < 0 removed an entry")
	}
}

// TestMarkUsed: a use refreshes the binary's time, but not more often than
// once per usedRefresh (a cache hit stays free of writes).
func TestMarkUsed(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	mtime := func() time.Time {
		st, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		return st.ModTime()
	}
	recent := now.Add(-10 * time.Minute)
	os.Chtimes(bin, recent, recent)
	markUsed(bin, now)
	if !mtime().Equal(recent) {
		t.Errorf("used 10 minutes ago: time moved to %v", mtime())
	}
	stale := now.Add(-2 * time.Hour)
	os.Chtimes(bin, stale, stale)
	markUsed(bin, now)
	if !mtime().Equal(now) {
		t.Errorf("used 2 hours ago: time %v, want %v", mtime(), now)
	}
}

// keepFresh refreshes the entry of a plugin whose binary could not be
// linked, while the plugin is open.
func TestKeepFresh(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "plugin")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(bin, old, old)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { keepFresh(bin, time.Millisecond, stop); close(done) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(st.ModTime()) < time.Hour {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the entry was not refreshed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	<-done
}
