package pluginhost

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Socket directories (specs/plugins.md, "Sockets"). Every Plugin has a
// temporary directory of its own, flowrun-plugin-<digits>, for the Unix
// sockets of its processes and the hard link of its built binary; Close
// removes it. A host killed with kill -9 cannot, so the directory records
// its owner (a file "owner": the pid, the process's start time, so that a
// reused pid is not taken for the owner, the boot and the pid namespace the
// pid means something in), and Open removes the directories in the same
// parent whose owner is provably gone.

const (
	sockDirPrefix = "flowrun-plugin-"
	ownerFile     = "owner"
	ownerHeader   = "flowrun plugin socket directory"
	// legacyAge: a directory without an owner record (made by a flowrun
	// from before the records) is removed only when nothing in it changed
	// for this long and no socket in it accepts a connection.
	legacyAge = 24 * time.Hour

	// maxSockPath is the longest path a Unix socket can have: sun_path is
	// 108 bytes, its NUL included (Go refuses a path of 108 bytes).
	maxSockPath = 107
	// sockPathBudget is the longest name put under a socket directory:
	// go-plugin's directory for each process ("/plugin-dir" and up to 10
	// digits, os.MkdirTemp's), holding go-plugin's sockets (the plugin's
	// and the host's broker's: "/plugin" and up to 10 digits,
	// os.CreateTemp's) and the Go SDK's step channel ("/steps-<pid>-<16
	// hex digits>.sock", a pid of up to 7 digits: pid_max is at most 2^22).
	sockPathBudget = len("/plugin-dir") + 10 + max(len("/plugin")+10, len("/steps-")+7+len("-")+16+len(".sock"))
	// sockParentMax is the longest parent directory a socket directory
	// ("/flowrun-plugin-" and up to 10 digits) can have.
	sockParentMax = maxSockPath - sockPathBudget - len("/"+sockDirPrefix) - 10
	// shortTempDir is where socket directories go when $TMPDIR is longer
	// than sockParentMax.
	shortTempDir = "/tmp"
)

// owner identifies a process across pid reuse.
type owner struct {
	pid   int
	start uint64 // field 22 of /proc/<pid>/stat: clock ticks after boot
	boot  string // /proc/sys/kernel/random/boot_id
	pidns string // the link /proc/self/ns/pid, like "pid:[4026531836]"
}

func (o owner) String() string {
	return fmt.Sprintf("%s\npid %d\nstart %d\nboot %s\npidns %s\n", ownerHeader, o.pid, o.start, o.boot, o.pidns)
}

// parseOwner reads a record String wrote; ok is false for anything else
// (a record being written, another format).
func parseOwner(b []byte) (o owner, ok bool) {
	s, ok := strings.CutSuffix(string(b), "\n")
	if !ok {
		return o, false
	}
	lines := strings.Split(s, "\n")
	if len(lines) != 5 || lines[0] != ownerHeader {
		return o, false
	}
	vals := make([]string, 4)
	for i, key := range []string{"pid", "start", "boot", "pidns"} {
		v, ok := strings.CutPrefix(lines[i+1], key+" ")
		if !ok || v == "" {
			return o, false
		}
		vals[i] = v
	}
	pid, err1 := strconv.Atoi(vals[0])
	start, err2 := strconv.ParseUint(vals[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return o, false
	}
	return owner{pid: pid, start: start, boot: vals[2], pidns: vals[3]}, true
}

// selfOwner is this process's record; ok is false where /proc cannot say
// (no record is written then, and nothing is removed for lack of one) —
// also where the /proc mounted is another pid namespace's (unshare -p
// without --mount-proc): its pids would name other processes.
func selfOwner() (o owner, ok bool) {
	if self, err := os.Readlink("/proc/self"); err != nil || self != strconv.Itoa(os.Getpid()) {
		return o, false
	}
	start, err := procStart("self")
	if err != nil {
		return o, false
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil || len(bytes.TrimSpace(boot)) == 0 {
		return o, false
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil || ns == "" {
		return o, false
	}
	return owner{pid: os.Getpid(), start: start, boot: string(bytes.TrimSpace(boot)), pidns: ns}, true
}

// procStart is the start time of process pid ("self" or a number): field
// 22 of /proc/<pid>/stat, counted after the command in parentheses (which
// may hold spaces and parentheses itself). A pid that names no process is
// an fs.ErrNotExist.
func procStart(pid string) (uint64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	return statStart(b)
}

func statStart(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:])) // from field 3
	if len(f) < 22-2 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(f[22-3], 10, 64)
}

// gone reports whether the owner's process provably ended: same boot and
// pid namespace as self (or the pid means nothing here), and no process
// with that pid, or one started at another time.
func (o owner) gone(self owner) bool {
	if o.boot != self.boot || o.pidns != self.pidns {
		return false
	}
	start, err := procStart(strconv.Itoa(o.pid))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return true
	}
	return err == nil && start != o.start
}

// writeOwner records self in dir; best effort. The record is renamed into
// place, so a sweep never reads half of one.
func writeOwner(dir string, self owner) {
	tmp := filepath.Join(dir, ownerFile+".tmp")
	if os.WriteFile(tmp, []byte(self.String()), 0o600) == nil {
		_ = os.Rename(tmp, filepath.Join(dir, ownerFile))
	}
}

// makeSockDir makes a socket directory in tmp (the temporary directory),
// or in short when a socket path under tmp could be too long for the
// kernel (fellBack is true then).
func makeSockDir(tmp, short string) (dir string, fellBack bool, err error) {
	if abs, err := filepath.Abs(tmp); err == nil {
		tmp = abs
	}
	if len(tmp) <= sockParentMax {
		dir, err := makeSockDirIn(tmp)
		return dir, false, err
	}
	if len(short) > sockParentMax {
		err = fmt.Errorf("%d bytes long as well", len(short))
	} else if dir, err = makeSockDirIn(short); err == nil {
		return dir, true, nil
	}
	return "", false, fmt.Errorf("TMPDIR (%s, %d bytes) is too long for the plugin's Unix sockets: a socket path under it would exceed the kernel's limit of %d bytes (TMPDIR may have at most %d bytes), and %s cannot be used instead (%w); set TMPDIR to a shorter directory",
		tmp, len(tmp), maxSockPath+1, sockParentMax, short, err)
}

// makeSockDirIn makes a socket directory in parent, recording this
// process as its owner, after removing the stale ones there.
func makeSockDirIn(parent string) (string, error) {
	self, ok := selfOwner()
	if ok {
		sweepSockDirs(parent, self, time.Now())
	}
	dir, err := os.MkdirTemp(parent, sockDirPrefix)
	if err != nil {
		return "", err
	}
	if ok {
		writeOwner(dir, self)
	}
	return dir, nil
}

// sweepSockDirs removes the socket directories in parent that are stale:
// those of this user whose owner record proves the owner gone, and those
// without a record (a flowrun from before the records) unchanged for
// legacyAge whose sockets nobody listens on. A record that cannot be read
// or parsed keeps its directory. Best effort: errors are ignored.
func sweepSockDirs(parent string, self owner, now time.Time) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !isSockDirName(e.Name()) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		if !ownedByUs(dir) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		switch {
		case err == nil:
			if o, ok := parseOwner(b); ok && o.gone(self) {
				_ = os.RemoveAll(dir)
			}
		case errors.Is(err, fs.ErrNotExist):
			if legacyStale(dir, now) {
				_ = os.RemoveAll(dir)
			}
		}
	}
}

// isSockDirName: flowrun-plugin- and the digits os.MkdirTemp adds.
func isSockDirName(name string) bool {
	digits, ok := strings.CutPrefix(name, sockDirPrefix)
	if !ok || digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func ownedByUs(path string) bool {
	st, err := os.Lstat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Getuid()
}

// legacyStale reports whether a directory without an owner record can go:
// neither it nor anything in it was modified for legacyAge, and none of
// its sockets accepts a connection (a live host's plugins listen on theirs
// as long as they run; a connection works across network namespaces).
// Anything it cannot read keeps the directory.
func legacyStale(dir string, now time.Time) bool {
	var sockets []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if now.Sub(info.ModTime()) < legacyAge {
			return errRecent
		}
		if d.Type()&fs.ModeSocket != 0 {
			sockets = append(sockets, path)
		}
		return nil
	})
	if err != nil {
		return false
	}
	for _, s := range sockets {
		c, err := net.DialTimeout("unix", s, time.Second)
		if err == nil {
			c.Close()
			return false
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
			return false
		}
	}
	return true
}

var errRecent = errors.New("modified recently")
