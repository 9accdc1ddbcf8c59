package tx

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A FileLog used out of order — Snapshot or Append before Recover, Recover
// twice, Recover, Snapshot or Append after Close — or handed staged writes,
// which it cannot store, is refused with a typed error
// (ErrMisuse; ErrClosed once closed) and makes no file. Snapshot
// dereferenced the missing segment and panicked with the log's lock held
// (in non-sync mode having made a new segment first); Recover after Close
// opened a segment that no Close would close; the other refusals wrapped no
// sentinel.
func TestFileLogMisuseRefused(t *testing.T) {
	edit := []Edit{{Kind: EditAborted, TxID: 1}}
	for _, sync := range []bool{false, true} {
		open := func(recovered, closed bool) (*FileLog, string) {
			dir := t.TempDir()
			l, err := OpenFileLog(dir, FileLogOptions{Sync: sync})
			if err != nil {
				t.Fatal(err)
			}
			if recovered {
				if _, _, err := l.Recover(); err != nil {
					t.Fatal(err)
				}
				if err := l.Append(&Batch{Edits: edit, Wait: true}); err != nil {
					t.Fatal(err)
				}
			}
			if closed {
				if err := l.Close(); err != nil {
					t.Fatal(err)
				}
			}
			return l, dir
		}
		for _, c := range []struct {
			name              string
			recovered, closed bool
			call              func(*FileLog) error
			want              error
		}{
			{"Snapshot before Recover", false, false, snapshotCall, ErrMisuse},
			{"Append before Recover", false, false, func(l *FileLog) error { return l.Append(&Batch{Edits: edit, Wait: true}) }, ErrMisuse},
			{"Recover twice", true, false, func(l *FileLog) error { _, _, err := l.Recover(); return err }, ErrMisuse},
			{"Recover after Close", false, true, func(l *FileLog) error { _, _, err := l.Recover(); return err }, ErrClosed},
			{"Snapshot after Close", true, true, snapshotCall, ErrClosed},
			{"Append after Close", true, true, func(l *FileLog) error { return l.Append(&Batch{Edits: edit, Wait: true}) }, ErrClosed},
			{"unwaited Append after Close", true, true, func(l *FileLog) error { return l.Append(&Batch{Edits: edit}) }, ErrClosed},
			{"Append with staged writes", true, false, func(l *FileLog) error {
				return l.Append(&Batch{Edits: edit, Writes: []Write{{Key: []byte("k")}}, Wait: true})
			}, ErrMisuse},
			{"Close twice", true, true, (*FileLog).Close, nil},
		} {
			l, dir := open(c.recovered, c.closed)
			before, _ := filepath.Glob(filepath.Join(dir, "*"))
			err := errOrPanic(func() error { return c.call(l) })
			if !errors.Is(err, c.want) || (c.want != nil) != (err != nil) {
				t.Errorf("sync=%v: %s = %v, want %v", sync, c.name, err, c.want)
			}
			if after, _ := filepath.Glob(filepath.Join(dir, "*")); len(after) != len(before) {
				t.Errorf("sync=%v: %s made files: %v, was %v", sync, c.name, after, before)
			}
		}
	}
}

func snapshotCall(l *FileLog) error {
	write, err := l.Snapshot(&State{})
	if err == nil {
		err = write()
	}
	return err
}

// A snapshot's temporary file that a crash left (snap-*.bin.tmp) is removed
// at recovery: no later snapshot reuses its name, so it stayed for good.
func TestRecoveryRemovesStaleSnapshotTemp(t *testing.T) {
	dir := snapshotThenCrash(t)
	stale := filepath.Join(dir, "snap-00000000000000ff.bin.tmp")
	if err := os.WriteFile(stale, []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	openFileCoord(t, dir, Options{})
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s after recovery: %v", filepath.Base(stale), err)
	}
}

// The stale temporary files are found by name in the log's directory, not
// by a glob built from its path: in a directory named logs[1] the glob
// matched logs1's, and recovery deleted the snapshot another log was
// writing there.
func TestRecoveryRemovesOnlyItsOwnSnapshotTemp(t *testing.T) {
	parent := t.TempDir()
	dir, sibling := filepath.Join(parent, "logs[1]"), filepath.Join(parent, "logs1")
	if err := os.Mkdir(sibling, 0o755); err != nil {
		t.Fatal(err)
	}
	others := filepath.Join(sibling, "snap-0000000000000002.bin.tmp")
	if err := os.WriteFile(others, []byte("being written"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := openFileCoord(t, dir, Options{})
	defer c.Close()
	if _, err := os.Stat(others); err != nil {
		t.Fatalf("another log's snapshot being written, after recovery: %v", err)
	}
}
