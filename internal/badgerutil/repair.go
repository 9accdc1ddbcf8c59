package badgerutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RemoveEmptyLogFiles deletes zero-length value-log (*.vlog) and memtable
// write-ahead-log (*.mem) files from a Badger directory. A kill -9 between
// Badger creating such a file and sizing it leaves it empty, and Badger v4
// then refuses to open the directory ("Open existing file ... Create a new
// file"). An empty file holds no data, so removing it loses nothing. Call it
// before badger.Open.
func RemoveEmptyLogFiles(dir string) error {
	for _, pattern := range []string{"*.vlog", "*.mem"} {
		matches, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			fi, err := os.Stat(m)
			if err != nil {
				return err
			}
			if fi.Size() == 0 {
				if err := os.Remove(m); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// ErrInUse: another process (or another DB in this one) has the directory
// open as a Badger DB.
var ErrInUse = errors.New("the Badger directory is in use")

// LockDir takes the lock Badger holds while a DB is open: an exclusive flock
// on the directory itself (Badger's LOCK file only records the pid). It
// fails with ErrInUse while a DB is open there. Release it before
// badger.Open, which takes it again. A directory that does not exist, or a
// file system without flock, gets a no-op unlock.
func LockDir(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return func() {}, nil
		}
		return nil, err
	}
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) && holderGone(dir) {
		if heirWaitHook != nil {
			heirWaitHook()
		}
		err = flockPolling(f, heirWait)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrInUse, dir)
		}
		return func() {}, nil // no flock here: Badger decides
	}
	return func() {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// RepairBeforeOpen is RemoveEmptyLogFiles under LockDir: a process that has
// the DB open may be creating a log file (empty for an instant), which must
// not be taken for a crash's leftover. If the directory is in use it does
// nothing, and badger.Open reports it.
func RepairBeforeOpen(dir string) error {
	unlock, err := LockDir(dir)
	if errors.Is(err, ErrInUse) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	return RemoveEmptyLogFiles(dir)
}

// heirWait bounds LockDir's wait for a lock whose holder, as Badger
// recorded it (dir/LOCK), is gone: a process the holder was starting when
// it was killed (between fork and exec) has a copy of its descriptors, the
// locked directory's among them, until its exec closes them.
const heirWait = 10 * time.Second

// heirWaitHook, set by tests, runs when LockDir starts waiting for a dead
// holder's heir.
var heirWaitHook func()

// holderGone reports whether dir/LOCK names a process that no longer exists.
func holderGone(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "LOCK"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return err == nil && pid > 0 && errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

// flockPolling tries the lock until it gets it or wait passed.
func flockPolling(f *os.File, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}
