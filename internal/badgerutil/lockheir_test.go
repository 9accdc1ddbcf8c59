package badgerutil

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// holdLock flocks dir on an open file description of its own, as a
// process that inherited the dead holder's descriptor would, and writes
// pid into dir/LOCK as Badger does; release lets it go.
func holdLock(t *testing.T, dir string, pid int) (release func()) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "LOCK"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return func() { f.Close() }
}

// deadPid is the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// TestLockDirWaitsForTheDeadHoldersHeir: right after a kill -9, a process
// the killed one was starting (between fork and exec) can still hold a
// copy of the locked directory's descriptor for a while. When the pid
// Badger recorded is gone, LockDir waits for the lock instead of calling
// the store in use.
func TestLockDirWaitsForTheDeadHoldersHeir(t *testing.T) {
	dir := t.TempDir()
	release := holdLock(t, dir, deadPid(t))
	heirWaitHook = release // the heir execs once LockDir found the lock taken
	t.Cleanup(func() { heirWaitHook = nil })
	unlock, err := LockDir(dir)
	if err != nil {
		t.Fatalf("LockDir with the recorded holder gone: %v, want the lock once the heir let it go", err)
	}
	unlock()
}

// A live recorded holder is a store in use: LockDir fails at once.
func TestLockDirLiveHolderInUse(t *testing.T) {
	dir := t.TempDir()
	holdLock(t, dir, os.Getpid())
	if _, err := LockDir(dir); !errors.Is(err, ErrInUse) {
		t.Fatalf("LockDir with a live holder: %v, want ErrInUse", err)
	}
}
