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
	// Sync makes every waited Append sync to disk before returning (durable
	// mode). Without it appends are copied into the segment's shared memory
	// map before returning, so they survive a killed process but not a power
	// failure.
	Sync bool
	// SegmentSize is the size of each preallocated, memory-mapped segment
	// file. Default 64 MiB.
	SegmentSize int
}

// FileLog is the general edit log: segment files of CRC-framed batches in one
// directory, plus snapshot files. Concurrent waited appends are grouped: one
// goroutine (the leader) writes and syncs everything pending while the others
// wait, so N committers share one fsync.
//
// Directory layout: wal-<seq>.log segments (hex seq), snap-<seq>.bin snapshots
// covering every segment below <seq>. Segments are preallocated and memory
// mapped: appending is a copy, and a never-written rest reads as zeros.
type FileLog struct {
	dir     string
	sync    bool
	segSize int

	mu      sync.Mutex
	cond    *sync.Cond
	seg     *segment
	seq     uint64 // current segment
	pending []byte // encoded edits not yet written
	// splits are offsets in pending where a new frame starts: batches
	// pile up there (unwaited edits, committers queued behind a sync) and
	// together may not fit one segment, though each does. frameStart is
	// where the last frame of pending begins.
	splits     []int
	frameStart int
	appended   uint64 // batches appended
	written    uint64 // batches copied into a segment
	synced     uint64 // batches synced (Sync mode)
	syncedSeg  *segment
	syncedOff  int
	flushing   bool // a leader is syncing
	syncs      uint64
	err        error
	closed     bool
	recovered  bool
}

// OpenFileLog opens (creating if needed) a log directory. Call Open on a
// coordinator with it; the coordinator calls Recover.
func OpenFileLog(dir string, opts FileLogOptions) (*FileLog, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tx: file log: %w", err)
	}
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = 64 << 20
	}
	l := &FileLog{dir: dir, sync: opts.Sync, segSize: opts.SegmentSize}
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
	if l.recovered || l.closed {
		return nil, nil, l.unusableLocked("Recover")
	}
	// A snapshot's temporary file left by a crash (or a failed write) is
	// never one (the rename makes it so) and no later snapshot reuses its
	// name: without this each stayed on disk for good. (Listed, not
	// globbed: a directory named logs[1] would match logs1's.)
	if stale, err := l.list("snap-", ".bin.tmp"); err == nil {
		for _, seq := range stale {
			os.Remove(l.snapPath(seq) + ".tmp")
		}
	}
	snaps, err := l.list("snap-", ".bin")
	if err != nil {
		return nil, nil, err
	}
	var state *State
	var from uint64
	if n := len(snaps); n > 0 {
		// Only the newest snapshot counts, and it must be whole. A crash
		// cannot tear one (it is written to a temporary file, synced, then
		// renamed), and the segments it covers may be deleted already, so
		// an older snapshot (or none) would silently lose what it covered:
		// commits, the invalid list, pointer reservations. Refuse instead.
		path := l.snapPath(snaps[n-1])
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		payload, size, ok := nextFrame(b)
		if !ok || size != len(b) {
			return nil, nil, fmt.Errorf("%w: %s: damaged snapshot (%d bytes, checksum or length wrong)", ErrCorrupt, path, len(b))
		}
		if state, err = decodeState(payload); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		from = snaps[n-1]
	}
	segs, err := l.list("wal-", ".log")
	if err != nil {
		return nil, nil, err
	}
	// The segments after the snapshot are from, from+1, ... (the first log
	// starts at 1): a hole means a lost segment, and replaying around it
	// would skip what it held.
	segs = slices.DeleteFunc(segs, func(seq uint64) bool { return seq < from })
	want := max(from, 1)
	if from > 0 && len(segs) == 0 { // the snapshot's roll made segment from
		return nil, nil, fmt.Errorf("%w: %s: segment %s missing (snapshot %d)", ErrCorrupt, l.dir, filepath.Base(l.segPath(want)), from)
	}
	for _, seq := range segs {
		if seq != want {
			return nil, nil, fmt.Errorf("%w: %s: segment %s missing (snapshot %d)", ErrCorrupt, l.dir, filepath.Base(l.segPath(want)), from)
		}
		want++
	}
	var edits []Edit
	last := from
	for i, seq := range segs {
		last = max(last, seq)
		path := l.segPath(seq)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		off := 0
		for off < len(b) {
			if zeroHeader(b[off:]) {
				if allZero(b[off:]) {
					off = len(b) // the preallocated, never written rest
				}
				break // else zeros where a frame starts, data after: damage
			}
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
			// A torn tail: the batch was never acknowledged. Cut it off,
			// durably: the next segment is created (and the directory
			// synced) next, and a cut lost to a power failure would then
			// leave the damage before the last segment, which is refused.
			if err := truncateSync(path, int64(off)); err != nil {
				return nil, nil, err
			}
		} else if l.sync {
			// What is replayed is acted on (commits turn visible, later
			// ones build on them in the next segment), so it must be
			// durable first: a process killed during a group sync left
			// frames written but not synced, which a power loss after
			// this recovery would take away.
			if err := syncPath(path); err != nil {
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

// unusableLocked is the refusal of a call before Recover, after Close, or
// of a second Recover.
func (l *FileLog) unusableLocked(call string) error {
	switch {
	case l.closed:
		return fmt.Errorf("%w: file log: %s after Close", ErrClosed, call)
	case l.recovered:
		return fmt.Errorf("%w: file log: %s called twice", ErrMisuse, call)
	}
	return fmt.Errorf("%w: file log: %s before Recover", ErrMisuse, call)
}

func (l *FileLog) openSegment(seq uint64) error {
	seg, err := createSegment(l.segPath(seq), l.segSize, l.sync)
	if err != nil {
		return fmt.Errorf("tx: file log: %w", err)
	}
	if l.sync {
		if err := syncDir(l.dir); err != nil {
			seg.close()
			return err
		}
	}
	l.seg, l.seq = seg, seq
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

// inlineAppend: without Sync a waited append is a copy into the map, cheap
// enough for the coordinator to do while holding its lock.
func (l *FileLog) inlineAppend() bool { return !l.sync }

// Append adds b's edits to the log. With b.Wait it returns once they (and
// everything appended before) are in the segment's shared memory map, which
// the OS keeps if the process dies, and in Sync mode once they are synced;
// the caller that finds no sync running becomes the leader and syncs for
// everyone waiting behind it.
func (l *FileLog) Append(b *Batch) error {
	if len(b.Writes) > 0 {
		return fmt.Errorf("%w: file log cannot store participant writes; use BadgerLog for the fast path", ErrMisuse)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if l.seg == nil {
		return l.unusableLocked("Append")
	}
	before := len(l.pending)
	for i := range b.Edits {
		l.pending = appendEdit(l.pending, &b.Edits[i])
	}
	if n := len(l.pending) - before; n+8 > l.segSize {
		l.pending = l.pending[:before] // refused whole; the log stays usable
		return fmt.Errorf("%w: a batch of %d bytes exceeds the log segment size %d", ErrTooLarge, n, l.segSize)
	}
	if frameSize(len(l.pending)-l.frameStart) > l.segSize {
		l.splits = append(l.splits, before) // this batch starts a frame of its own
		l.frameStart = before
	}
	if len(b.Edits) > 0 {
		l.appended++
	}
	if !b.Wait {
		return nil
	}
	mine := l.appended
	if !l.sync {
		// Copying into the map is all it takes to survive a killed process.
		if l.written < mine {
			l.writeLocked()
		}
		return l.err
	}
	// A batch a sync covered is durable, whatever later syncs did.
	for l.synced < mine {
		if l.err != nil {
			return l.err
		}
		if l.flushing {
			l.cond.Wait()
			continue
		}
		if l.seg == nil { // closed under us without syncing this
			return errors.New("tx: file log: closed")
		}
		l.syncLocked(!b.closing)
	}
	return nil
}

// writeLocked copies everything pending into the segment, as one frame
// unless it was split (see splits), rolling to a new segment when it is full.
func (l *FileLog) writeLocked() {
	if len(l.pending) == 0 {
		l.written = l.appended
		return
	}
	from := 0
	for _, to := range l.splits {
		if !l.writeFrameLocked(l.pending[from:to]) {
			return
		}
		from = to
	}
	if !l.writeFrameLocked(l.pending[from:]) {
		return
	}
	l.pending = l.pending[:0]
	l.splits, l.frameStart = l.splits[:0], 0
	l.written = l.appended
}

func (l *FileLog) writeFrameLocked(payload []byte) bool {
	n := frameSize(len(payload))
	if !l.seg.fits(n) {
		if err := l.rollLocked(); err != nil {
			l.err = fmt.Errorf("tx: file log: %w", err)
			return false
		}
		if !l.seg.fits(n) {
			// Not ErrTooLarge, which says nothing was written: Append
			// refuses larger batches, so this cannot happen.
			l.err = fmt.Errorf("tx: file log: a frame of %d bytes exceeds the segment size %d", n, l.segSize)
			return false
		}
	}
	if err := l.seg.writeFrame(payload); err != nil {
		l.err = fmt.Errorf("tx: file log: %w", err)
		return false
	}
	if !l.sync {
		l.seg.prefaultAhead()
	}
	return true
}

// rollLocked moves to a new segment, syncing the full one first in Sync mode:
// before the next one exists, since recovery takes damage before the last
// segment for corruption, not for a torn tail that was never acknowledged.
func (l *FileLog) rollLocked() error {
	old := l.seg
	if l.sync {
		if err := old.sync(0, old.off); err != nil {
			return err
		}
	}
	if err := l.openSegment(l.seq + 1); err != nil {
		return err
	}
	return old.close()
}

// syncLocked writes what is pending and syncs it, dropping the lock during
// the sync so that others can queue up behind it: N waiters share one sync.
// counted: the sync counts in Stats.LogSyncs (not Close's flush).
func (l *FileLog) syncLocked(counted bool) {
	l.writeLocked()
	if l.err != nil {
		return
	}
	upTo, seg, from, to := l.written, l.seg, l.syncedOff, l.seg.off
	if seg != l.syncedSeg {
		from = 0
	}
	l.flushing = true
	if counted {
		l.syncs++
	}
	l.mu.Unlock()
	err := seg.sync(from, to)
	l.mu.Lock()
	l.flushing = false
	if err != nil {
		l.err = fmt.Errorf("tx: file log: %w", err)
	} else {
		l.synced = max(l.synced, upTo)
		l.syncedSeg, l.syncedOff = seg, to
	}
	l.cond.Broadcast()
}

// syncCounts implements syncCounter (a FileLog does not gather).
func (l *FileLog) syncCounts() (syncs, gathers, joined uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncs, 0, 0
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
	if l.seg == nil {
		l.mu.Unlock()
		return nil, l.unusableLocked("Snapshot")
	}
	// Edits still pending are reflected in s; write them anyway so that the
	// old segments alone stay a complete record if the snapshot never lands.
	l.writeLocked()
	if l.err == nil {
		if err := l.rollLocked(); err != nil {
			l.err = fmt.Errorf("tx: file log: %w", err)
		}
	}
	l.synced = l.written
	seq, err := l.seq, l.err
	l.mu.Unlock()
	if err != nil {
		return nil, err
	}
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

func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	return syncClose(f, f.Truncate(size))
}

// syncPath syncs the segment file at path (one recovery replays).
func syncPath(path string) error {
	if h := testHookSegmentSync; h != nil {
		h(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return syncClose(f, nil)
}

func writeFileSync(path string, b []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return syncClose(f, err)
}

// syncClose syncs and closes f after an operation on it ended with err.
func syncClose(f *os.File, err error) error {
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// Close writes and syncs what is pending and closes the current segment.
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
	if l.seg == nil {
		return nil
	}
	if l.err == nil {
		l.writeLocked()
	}
	var err error
	if l.err == nil {
		err = l.seg.sync(0, l.seg.off)
	}
	err = errors.Join(l.err, err, l.seg.close())
	l.seg = nil
	// Appenders waiting behind a sync that Close waited out are done: what
	// they appended is synced, or the log failed.
	if err == nil {
		l.synced = l.written
	} else if l.err == nil {
		l.err = fmt.Errorf("tx: file log: close: %w", err)
	}
	l.cond.Broadcast()
	return err
}
