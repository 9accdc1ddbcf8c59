package tx

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
)

// A writeback error is reported once per open file (Linux's errseq): by the
// first fdatasync of that file after it, not by the ones after. The zeroing
// goroutine syncs the segment's file too, and it dropped its sync's error:
// when that sync was the one told that pages of frames could not be
// written, the next group sync succeeded and acknowledged commits that were
// not on disk. Its error now fails the segment's next sync.
func TestZeroingSyncErrorFailsNextSync(t *testing.T) {
	var writebackErr atomic.Pointer[error] // reported once, to the first fdatasync
	reported := make(chan struct{})
	testHookFdatasync = func(f *os.File) error {
		if err := writebackErr.Swap(nil); err != nil {
			close(reported)
			return *err
		}
		return fdatasync(f)
	}
	firstSynced := make(chan struct{})
	var zeroings atomic.Int32
	testHookZeroing = func(from, to int) {
		if zeroings.Add(1) == 1 {
			<-firstSynced
			eio := error(syscall.EIO) // a page of the first frame failed its writeback
			writebackErr.Store(&eio)
		}
	}
	t.Cleanup(func() { testHookFdatasync, testHookZeroing = nil, nil })

	l, err := OpenFileLog(t.TempDir(), FileLogOptions{Sync: true, SegmentSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, _, err := l.Recover(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&Batch{Edits: []Edit{{Kind: EditReserve, Pointer: 100}}, Wait: true}); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	zeroing := l.seg.zeroing != nil
	l.mu.Unlock()
	if !zeroing {
		t.Fatal("no zeroing after the first frame: nothing tested")
	}
	close(firstSynced)
	<-reported // the zeroing's sync was told
	err = l.Append(&Batch{Edits: []Edit{{Kind: EditReserve, Pointer: 200}}, Wait: true})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("append synced after a writeback error the zeroing's sync was told of: %v", err)
	}
}

// The roll of a snapshot syncs the full segment (under the log's lock)
// while the zeroing may hold the segment's sync mutex in its own
// fdatasync: the roll waits for it, neither deadlocks, and an error the
// zeroing's sync was told of fails the roll (the segment's last sync), not
// only a later one.
func TestRollWaitsForZeroingSync(t *testing.T) {
	zeroingSyncs := make(chan struct{})
	failIt := make(chan error)
	var blockNext atomic.Bool
	testHookFdatasync = func(f *os.File) error {
		if blockNext.Swap(false) {
			close(zeroingSyncs)
			if err := <-failIt; err != nil {
				return err
			}
		}
		return fdatasync(f)
	}
	zeroAllowed := make(chan struct{})
	testHookZeroing = func(from, to int) { <-zeroAllowed }
	t.Cleanup(func() { testHookFdatasync, testHookZeroing = nil, nil })

	l, err := OpenFileLog(t.TempDir(), FileLogOptions{Sync: true, SegmentSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Recover(); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&Batch{Edits: []Edit{{Kind: EditReserve, Pointer: 100}}, Wait: true}); err != nil {
		t.Fatal(err)
	}
	blockNext.Store(true) // the zeroing's is the next fdatasync
	close(zeroAllowed)
	<-zeroingSyncs // it holds the segment's sync mutex now
	rolled := make(chan error, 1)
	go func() {
		_, err := l.Snapshot(&State{NextPointer: 100})
		rolled <- err
	}()
	failIt <- syscall.EIO
	if err := <-rolled; !errors.Is(err, syscall.EIO) {
		t.Fatalf("snapshot's roll after the zeroing's sync failed = %v, want EIO", err)
	}
	if err := l.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close of the failed log = %v, want its EIO", err)
	}
}
