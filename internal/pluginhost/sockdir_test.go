package pluginhost_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// procOwner is the owner record (specs/plugins.md, "Sockets") of process
// pid as it runs now, read from /proc like the host does; the test skips
// where there is no /proc.
func procOwner(t *testing.T, pid int) (start uint64, boot, pidns string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if start, err = strconv.ParseUint(f[22-3], 10, 64); err != nil {
		t.Fatal(err)
	}
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skipf("no boot id: %v", err)
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Skipf("no pid namespace: %v", err)
	}
	return start, strings.TrimSpace(string(id)), ns
}

func ownerRecord(pid int, start uint64, boot, pidns string) string {
	return fmt.Sprintf("flowrun plugin socket directory\npid %d\nstart %d\nboot %s\npidns %s\n", pid, start, boot, pidns)
}

// sockDirs are the plugin socket directories in parent.
func sockDirs(t *testing.T, parent string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(parent, "flowrun-plugin-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// shortTempDir is a new directory directly in /tmp, short enough for the
// sockets of a plugin's processes, for TMPDIR.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "fr")
	if err != nil {
		t.Skipf("no /tmp: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestOpenRemovesStaleSockDirs: Open removes the socket directories of
// hosts that are gone (killed with kill -9: the owner's pid is free, or
// names a process started later), hard link of the binary and all, and
// keeps those of live processes, those without an owner record and those
// whose record it cannot read. Its own directory records this process.
func TestOpenRemovesStaleSockDirs(t *testing.T) {
	self := os.Getpid()
	start, boot, pidns := procOwner(t, self)
	tmp := shortTempDir(t)
	t.Setenv("TMPDIR", tmp)

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { child.Process.Kill(); child.Wait() }()
	childStart, _, _ := procOwner(t, child.Process.Pid)

	dir := func(name, owner string) string {
		t.Helper()
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "testplugin"), []byte("a binary"), 0o755); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(d, "owner"), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	gone := []string{
		dir("flowrun-plugin-1001", ownerRecord(dead.Process.Pid, 1, boot, pidns)),
		dir("flowrun-plugin-1002", ownerRecord(self, start+1, boot, pidns)), // the pid reused
		dir("flowrun-plugin-1003", ownerRecord(child.Process.Pid, childStart-1, boot, pidns)),
	}
	kept := []string{
		dir("flowrun-plugin-2001", ownerRecord(self, start, boot, pidns)),
		dir("flowrun-plugin-2002", ownerRecord(child.Process.Pid, childStart, boot, pidns)),
		dir("flowrun-plugin-2003", ""),                                                // an older version's, or one being made
		dir("flowrun-plugin-2004", "pid 1\n"),                                         // not a record
		dir("flowrun-plugin-2005", ownerRecord(dead.Process.Pid, 1, boot, "pid:[1]")), // another pid namespace's
		dir("flowrun-plugin-2006", ownerRecord(dead.Process.Pid, 1, "another-boot", pidns)),
		dir("other-2007", ownerRecord(dead.Process.Pid, 1, boot, pidns)),
	}
	before := sockDirs(t, tmp)

	p := open(t, "sweep", "testplugin", options(t, nil))
	for _, d := range gone {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("%s (owner gone) stayed", filepath.Base(d))
		}
	}
	for _, d := range kept {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(d), err)
		}
	}
	var own []string
	for _, d := range sockDirs(t, tmp) {
		if !slices.Contains(before, d) {
			own = append(own, d)
		}
	}
	if len(own) != 1 {
		t.Fatalf("the plugin's socket directory: %v", own)
	}
	b, err := os.ReadFile(filepath.Join(own[0], "owner"))
	if string(b) != ownerRecord(self, start, boot, pidns) {
		t.Errorf("owner record %q (%v), want %q", b, err, ownerRecord(self, start, boot, pidns))
	}
	p.Close()
	if _, err := os.Stat(own[0]); err == nil {
		t.Error("Close left the socket directory")
	}
}

// TestLongTMPDIR: with a TMPDIR too long for a Unix socket path under it
// (the kernel's limit is 107 bytes), a plugin still starts, serves its
// steps over the step channel and reads state through the host's broker:
// its sockets, and the host's, go to a directory under /tmp.
func TestLongTMPDIR(t *testing.T) {
	long := filepath.Join(shortTempDir(t), strings.Repeat("x", 100))
	if err := os.Mkdir(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	logs := &logBuf{}
	p := open(t, "long", "testplugin", options(t, logs))
	f := p.New()
	ctx := flowlettest.New("long")
	if err := ctx.Init(f, map[string]any{"prefix": "l-"}); err != nil {
		t.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()
	if err := ctx.Process(f, ev("put:a=1"), ev("get:a"), ev("count:x")); err != nil {
		t.Fatal(err)
	}
	if err := ctx.Process(f, ev("get:a"), ev("count:x")); err != nil {
		t.Fatal(err)
	}
	if g, c := ctx.Emits("got"), ctx.Emits("counts"); !slices.Equal(g, []string{"1", "1"}) || !slices.Equal(c, []string{"x=1", "x=2"}) {
		t.Errorf("state through the broker: got %v, counts %v", g, c)
	}
	if tr := transport(f); tr != "channel" {
		t.Errorf("steps over %q, want the step channel", tr)
	}
	if l := logs.String(); strings.Contains(l, "invalid argument") {
		t.Errorf("log:\n%s", l)
	}
	// Nothing under the long TMPDIR: neither the plugin's socket
	// directory nor the sockets of the host's broker.
	if left, _ := os.ReadDir(long); len(left) != 0 {
		t.Errorf("under the long TMPDIR: %v", left)
	}
}
