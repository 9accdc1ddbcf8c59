package pluginhost

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSweepLegacySockDirs: a directory without an owner record (a flowrun
// from before the records) goes only when nothing in it changed for a day
// and no socket in it accepts a connection.
func TestSweepLegacySockDirs(t *testing.T) {
	self, ok := selfOwner()
	if !ok {
		t.Skip("no /proc")
	}
	parent := t.TempDir()
	now := time.Now()
	old := now.Add(-25 * time.Hour)
	dir := func(name string, at time.Time, files ...string) string {
		t.Helper()
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			p := filepath.Join(d, f)
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(p, at, at)
		}
		os.Chtimes(d, at, at)
		return d
	}
	// A socket nobody listens on any more (its host was killed).
	deadSock := func(d string) {
		t.Helper()
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(d, "plugin123"), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false)
		l.Close()
		os.Chtimes(filepath.Join(d, "plugin123"), old, old)
		os.Chtimes(d, old, old)
	}
	stale := dir("flowrun-plugin-1", old, "testplugin")
	deadSock(stale)
	empty := dir("flowrun-plugin-2", old)
	recent := dir("flowrun-plugin-3", now.Add(-23*time.Hour), "testplugin")
	recentFile := dir("flowrun-plugin-4", old, "testplugin")
	os.Chtimes(filepath.Join(recentFile, "testplugin"), now, now)
	listening := dir("flowrun-plugin-5", old)
	l, err := net.Listen("unix", filepath.Join(listening, "plugin9"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Chtimes(filepath.Join(listening, "plugin9"), old, old)
	os.Chtimes(listening, old, old)
	notOurs := dir("flowrun-pluginx", old)
	unreadable := dir("flowrun-plugin-6", old, ownerFile)
	os.WriteFile(filepath.Join(unreadable, ownerFile), []byte("garbage"), 0o600)
	os.Chtimes(unreadable, old, old)

	sweepSockDirs(parent, self, now)
	exists := func(d string) bool { _, err := os.Stat(d); return err == nil }
	for _, d := range []string{stale, empty} {
		if exists(d) {
			t.Errorf("%s stayed", filepath.Base(d))
		}
	}
	for _, d := range []string{recent, recentFile, listening, notOurs, unreadable} {
		if !exists(d) {
			t.Errorf("%s was removed", filepath.Base(d))
		}
	}
}

// TestOwnerRecord: a record reads back; anything else is no record.
func TestOwnerRecord(t *testing.T) {
	o := owner{pid: 42, start: 12345, boot: "b-1", pidns: "pid:[7]"}
	if got, ok := parseOwner([]byte(o.String())); !ok || got != o {
		t.Fatalf("parse(%q) = %+v, %v", o.String(), got, ok)
	}
	s := o.String()
	for _, bad := range []string{"", s[:len(s)-1], s[:len(s)/2], strings.Replace(s, "pid 42", "pid x", 1),
		strings.Replace(s, "pid 42", "pid 0", 1), strings.Replace(s, "boot b-1", "boot ", 1), "x" + s, s + "more\n"} {
		if got, ok := parseOwner([]byte(bad)); ok {
			t.Errorf("parse(%q) = %+v", bad, got)
		}
	}
	// A command with spaces and parentheses does not shift the field (it
	// is counted after the last parenthesis).
	stat := "77 (a) b (c) S 1 77 77 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615\n"
	if start, err := statStart([]byte(stat)); err != nil || start != 987654 {
		t.Errorf("start of %q: %d, %v", stat, start, err)
	}
	self, ok := selfOwner()
	if !ok {
		t.Skip("no /proc")
	}
	if self.gone(self) {
		t.Error("this process is gone")
	}
}

// TestSockDirTooLong: a TMPDIR too long for socket paths under it puts the
// socket directory under the short fallback; when that cannot be used
// either, the error names TMPDIR and the limit. A socket at the longest
// path the budget allows under the longest parent can be made.
func TestSockDirTooLong(t *testing.T) {
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("x", 100))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	short, err := os.MkdirTemp("/tmp", "fr")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(short)
	dir, fellBack, err := makeSockDir(long, short)
	if err != nil || !fellBack || filepath.Dir(dir) != short {
		t.Fatalf("makeSockDir(long, %s) = %s, %v, %v", short, dir, fellBack, err)
	}
	dir, fellBack, err = makeSockDir(short, "/nonexistent")
	if err != nil || fellBack || filepath.Dir(dir) != short {
		t.Fatalf("makeSockDir(short) = %s, %v, %v", dir, fellBack, err)
	}
	_, _, err = makeSockDir(long, "/nonexistent")
	if err == nil || !strings.Contains(err.Error(), "TMPDIR ("+long) || !strings.Contains(err.Error(), "limit of 108 bytes") ||
		!strings.Contains(err.Error(), "/nonexistent") {
		t.Fatalf("want an error naming TMPDIR and the limit, got %v", err)
	}
	t.Log(err)

	// The budget: the longest parent, the longest names go-plugin and the
	// SDK put under it.
	parent := filepath.Join(short, strings.Repeat("p", sockParentMax-len(short)-1))
	sub := filepath.Join(parent, sockDirPrefix+"1234567890", "plugin-dir1234567890")
	if err := os.MkdirAll(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"plugin1234567890", "steps-4194304-0123456789abcdef.sock"} {
		l, err := net.Listen("unix", filepath.Join(sub, name))
		if err != nil {
			t.Fatalf("%d bytes: %v", len(filepath.Join(sub, name)), err)
		}
		l.Close()
	}
	if n := len(filepath.Join(sub, "steps-4194304-0123456789abcdef.sock")); n != maxSockPath {
		t.Errorf("the longest socket path is %d bytes, want %d", n, maxSockPath)
	}
}
