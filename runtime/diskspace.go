package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Disk space. Badger writes its value log and write-ahead logs through
// memory maps of files it created sparse: when the file system runs out of
// blocks, the write into the map faults (SIGBUS) and the process dies with a
// Go fatal error and a goroutine dump — recovery is exact, but the operator
// learns nothing about the cause. So the runtime keeps a reserve: it refuses
// to start with less than Options.MinFreeDisk free on the store's file
// system, and a running app that falls under it stops like on SIGTERM (steps
// in flight commit or abort, with the reserve to write into) and Run
// returns ErrDiskSpace. That stop writes only what it must: no sink
// publishes (what they would write stays in the store, and the next start
// publishes it first), and a StopDrainer's last steps, which commit what
// the source took and would lose otherwise, run only while stopDrainFree
// is free.

// DefaultMinFreeDisk is the reserve: a burst of writes within one check
// interval (at 150 MB/s, 40 MB) plus Badger's next files (a value-log file,
// a memtable's write-ahead log, a flushed table) fit in it. On a small file
// system the default reserve is a twentieth of it instead, but at least
// minAutoReserve: a 200 MiB volume holding a small app's store still runs.
const (
	DefaultMinFreeDisk = 128 << 20
	minAutoReserve     = 16 << 20
)

// diskCheckInterval is how often a running app looks at the free space.
const diskCheckInterval = 250 * time.Millisecond

// stopDrainFree is the free space each last step of a StopDrainer needs at a
// stop on a nearly full disk: four times what a stdin_source holds at most
// (8 MiB of lines), for the lines, their queue entries, Badger's logs and
// its flush at close. A stop that came late, after a burst took more than
// the reserve less this, loses what the source holds (logged) rather than
// risk Badger's crash on a full disk, which would lose it as well.
const stopDrainFree = 32 << 20

// ErrDiskSpace: the store's file system has less free space than the
// reserve.
var ErrDiskSpace = errors.New("not enough free disk space")

// freeBytes is the space an unprivileged writer may still use on dir's file
// system, and the file system's size.
var freeBytes = func(dir string) (free, size int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}

// checkDiskSpace returns ErrDiskSpace, with what to do, when dir's file
// system has less than min bytes free (min < 0: no check; 0: the default
// reserve for its size).
func checkDiskSpace(dir string, reserve int64) error {
	if reserve < 0 {
		return nil
	}
	free, size, err := freeBytes(dir)
	if err != nil {
		return nil // a file system that cannot say is not refused
	}
	if reserve == 0 {
		reserve = max(min(DefaultMinFreeDisk, size/20), minAutoReserve)
	}
	if free >= reserve {
		return nil
	}
	return fmt.Errorf("%w: %s has %d MiB free, under the %d MiB flowrun keeps in reserve for the store (Badger's memory-mapped writes crash the process on a full disk): free some space and run again — nothing was lost (--min-free-disk sets the reserve)",
		ErrDiskSpace, dir, free>>20, reserve>>20)
}

// diskRoomAtStop reports whether a last step of a StopDrainer is to run:
// always, unless the run stops on a nearly full disk and the file system
// has less than stopDrainFree free.
func (a *App) diskRoomAtStop() bool {
	if !a.diskStop.Load() {
		return true
	}
	free, _, err := freeBytes(a.opts.DataDir)
	return err != nil || free >= stopDrainFree // a file system that cannot say is not refused
}

// watchDiskSpace stops the run (stop) with ErrDiskSpace on fatal when the
// free space falls under the reserve, until ctx ends.
func (a *App) watchDiskSpace(ctx context.Context) {
	if a.opts.MinFreeDisk < 0 {
		return
	}
	t := time.NewTicker(diskCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := checkDiskSpace(a.opts.DataDir, a.opts.MinFreeDisk); err != nil {
				a.log.Error("stopping: the disk is nearly full", "data", a.opts.DataDir, "err", err)
				a.diskStop.Store(true) // before the stop: no instance misses it
				a.stopOn(err)
				return
			}
		}
	}
}
