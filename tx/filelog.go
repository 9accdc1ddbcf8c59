package tx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// FileLogOptions configure a FileLog.
type FileLogOptions struct {
	// Sync makes every waited Append fsync before returning (durable mode).
	// Without it appends are written to the OS before returning, so they
	// survive a killed process but not a power failure.
	Sync bool
}

// FileLog is the general edit log: segment files of CRC-framed batches in one
// directory, plus snapshot files. Concurrent waited appends are grouped: one
// goroutine (the leader) writes and syncs everything pending while the others
// wait, so N committers share one fsync.
//
// Directory layout: wal-<seq>.log segments (hex seq), snap-<seq>.bin snapshots
// covering every segment below <seq>.
type FileLog struct {
	dir  string
	sync bool

	mu        sync.Mutex
	cond      *sync.Cond
	f         *os.File
	seq       uint64 // current segment
	pending   []byte // encoded edits not yet written
	frame     []byte // reused buffer for the frame being written
	appended  uint64 // batches appended
	written   uint64 // batches written (and synced, in Sync mode)
	flushing  bool
	err       error
	closed    bool
	recovered bool
}

// OpenFileLog opens (creating if needed) a log directory. Call Open on a
// coordinator with it; the coordinator calls Recover.
func OpenFileLog(dir string, opts FileLogOptions) (*FileLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tx: file log: %w", err)
	}
	l := &FileLog{dir: dir, sync: opts.Sync}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

func (l *FileLog) segPath(seq uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("wal-%016x.log", seq))
}

func (l *FileLog) snapPath(seq uint64) string {
	return filepath.Join(l.dir, fmt.Sprintf("snap-%016x.bin", seq))
}

// list returns the sequence numbers of files named prefix-<hex>suffix, sorted.
func (l *FileLog) list(prefix, suffix string) ([]uint64, error) {
	ents, err := os.ReadDir(l.dir)
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix), 16, 64)
		if err == nil {
			seqs = append(seqs, n)
		}
	}
	slices.Sort(seqs)
	return seqs, nil
}

// Recover loads the newest readable snapshot and the edits of every segment
// after it. A torn tail of the last segment (a crash mid-write) is cut off;
// damage anywhere else is ErrCorrupt. Appends then go to a fresh segment.
func (l *FileLog) Recover() (*State, []Edit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.recovered {
		return nil, nil, errors.New("tx: file log: Recover called twice")
	}
	snaps, err := l.list("snap-", ".bin")
	if err != nil {
		return nil, nil, err
	}
	var state *State
	var from uint64
	for i := len(snaps) - 1; i >= 0 && state == nil; i-- {
		b, err := os.ReadFile(l.snapPath(snaps[i]))
		if err != nil {
			return nil, nil, err
		}
		payload, size, ok := nextFrame(b)
		if !ok || size != len(b) {
			continue // a snapshot torn by a crash: fall back to an older one
		}
		if state, err = decodeState(payload); err != nil {
			return nil, nil, err
		}
		from = snaps[i]
	}
	segs, err := l.list("wal-", ".log")
	if err != nil {
		return nil, nil, err
	}
	var edits []Edit
	last := from
	for i, seq := range segs {
		last = max(last, seq)
		if seq < from {
			continue
		}
		path := l.segPath(seq)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		off := 0
		for off < len(b) {
			payload, size, ok := nextFrame(b[off:])
			if !ok {
				break
			}
			if edits, err = decodeEdits(payload, edits); err != nil {
				return nil, nil, fmt.Errorf("%s at offset %d: %w", path, off, err)
			}
			off += size
		}
		if off < len(b) {
			if i != len(segs)-1 {
				return nil, nil, fmt.Errorf("%w: %s: damaged at offset %d of %d, before the last segment", ErrCorrupt, path, off, len(b))
			}
			// A torn tail: the batch was never acknowledged. Cut it off.
			if err := os.Truncate(path, int64(off)); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := l.openSegment(last + 1); err != nil {
		return nil, nil, err
	}
	l.recovered = true
	return state, edits, nil
}

func (l *FileLog) openSegment(seq uint64) error {
	f, err := os.OpenFile(l.segPath(seq), os.O_CREATE|os.O_WRONLY|os.O_APPEND|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("tx: file log: %w", err)
	}
	if l.sync {
		if err := syncDir(l.dir); err != nil {
			f.Close()
			return err
		}
	}
	l.f, l.seq = f, seq
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Append adds b's edits to the log. With b.Wait it returns once they (and
// everything appended before) are written, and synced in Sync mode; the caller
// that finds no flush running becomes the leader and flushes for everyone.
func (l *FileLog) Append(b *Batch) error {
	if len(b.Writes) > 0 {
		return errors.New("tx: file log cannot store participant writes; use BadgerLog for the fast path")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if l.f == nil {
		return errors.New("tx: file log: not recovered or closed")
	}
	for i := range b.Edits {
		l.pending = appendEdit(l.pending, &b.Edits[i])
	}
	if len(b.Edits) > 0 {
		l.appended++
	}
	if !b.Wait {
		return nil
	}
	mine := l.appended
	for l.written < mine && l.err == nil {
		if l.flushing {
			l.cond.Wait()
			continue
		}
		l.flushLocked()
	}
	return l.err
}

// flushLocked writes everything pending as one frame, dropping the lock
// during the I/O so that others can queue up behind it.
func (l *FileLog) flushLocked() {
	upTo := l.appended
	if len(l.pending) == 0 {
		l.written = upTo
		return
	}
	l.flushing = true
	frame := appendFrame(l.frame[:0], l.pending)
	l.pending = l.pending[:0] // the frame holds a copy; others append meanwhile
	f := l.f
	l.mu.Unlock()
	_, err := f.Write(frame)
	if err == nil && l.sync {
		err = f.Sync()
	}
	l.mu.Lock()
	l.frame = frame[:0]
	l.flushing = false
	if err != nil {
		l.err = fmt.Errorf("tx: file log: %w", err)
	} else {
		l.written = upTo
	}
	l.cond.Broadcast()
}

// Snapshot rolls to a new segment and returns a function that writes s as
// the snapshot covering every older segment, then deletes those.
func (l *FileLog) Snapshot(s *State) (func() error, error) {
	l.mu.Lock()
	for l.flushing {
		l.cond.Wait()
	}
	if l.err != nil {
		l.mu.Unlock()
		return nil, l.err
	}
	// Edits still pending are reflected in s; write them anyway so that the
	// old segments alone stay a complete record if the snapshot never lands.
	if len(l.pending) > 0 {
		if _, err := l.f.Write(appendFrame(nil, l.pending)); err != nil {
			l.err = fmt.Errorf("tx: file log: %w", err)
			l.mu.Unlock()
			return nil, l.err
		}
		l.pending = l.pending[:0]
	}
	l.written = l.appended
	old := l.f
	err := l.openSegment(l.seq + 1)
	seq := l.seq
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := old.Sync(); err != nil {
		return nil, err
	}
	old.Close()
	payload := encodeState(s)
	return func() error { return l.writeSnapshot(seq, payload) }, nil
}

func (l *FileLog) writeSnapshot(seq uint64, payload []byte) error {
	tmp := l.snapPath(seq) + ".tmp"
	if err := writeFileSync(tmp, appendFrame(nil, payload)); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.snapPath(seq)); err != nil {
		return err
	}
	if err := syncDir(l.dir); err != nil {
		return err
	}
	// Everything older is covered now.
	segs, _ := l.list("wal-", ".log")
	for _, s := range segs {
		if s < seq {
			os.Remove(l.segPath(s))
		}
	}
	snaps, _ := l.list("snap-", ".bin")
	for _, s := range snaps {
		if s < seq {
			os.Remove(l.snapPath(s))
		}
	}
	return nil
}

func writeFileSync(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Close flushes what is pending and closes the current segment.
func (l *FileLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	for l.flushing {
		l.cond.Wait()
	}
	l.closed = true
	if l.f == nil {
		return nil
	}
	if l.err == nil && len(l.pending) > 0 {
		l.flushLocked()
	}
	err := l.f.Close()
	l.f = nil
	return errors.Join(l.err, err)
}
