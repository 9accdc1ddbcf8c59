package builtin

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/flowrun/flowrun/flowlet"
)

func init() {
	flowlet.Register("file_sink", func() flowlet.Flowlet { return &FileSink{} }, flowlet.TypeInfo{
		Sink: true, SingleInstance: true, Doc: "appends each event's payload and \"\\n\" to a file after commit; idempotent after a crash",
	})
	flowlet.Register("stdout_sink", func() flowlet.Flowlet { return &StdoutSink{w: os.Stdout} }, flowlet.TypeInfo{
		Sink: true, Doc: "writes each event's payload and \"\\n\" to standard output after commit",
	})
}

// FileSink appends each input event's payload plus "\n" to a file.
//
// The file only ever shows committed output, exactly once: a step stages its
// records in the state table "outbox" (key: sequence number) in its own
// transaction; after the commit, Publish appends the committed records to
// the file, syncs it, and in a second transaction deletes them from the
// outbox and records the new file size, with a fingerprint of the bytes
// before it. If the process dies between the append and that commit, the
// next Publish truncates the file to the recorded size and appends the same
// records again. A file that already holds data when the sink first
// publishes on a store keeps it: the sink records that size (in a commit of
// its own) and appends after it. The file is locked (flock) while the app
// runs: one writer per file.
//
// A run truncates or appends to the file only once it found it to be the
// one the committed output is in: at least the committed size, with the
// fingerprinted bytes before it — under the recorded path, or under a new
// one while the recorded path no longer exists (the project was moved, the
// output renamed with the path). Anything else (another file at the path,
// the old output still at the old path) stops the sink with an error.
type FileSink struct {
	path  string
	abs   string // path made absolute: recorded with the committed size
	fsync bool
	f     *os.File
	w     *bufio.Writer
	// checked: this run found the file to hold the committed output (the
	// flock keeps it so while the run lasts); pathMoved: under a path
	// other than the recorded one, which publishes record.
	checked, pathMoved bool
	// tail holds the last bytes of the file before offset tailOff (at
	// least min(tailOff, tailWindow) of them, at most 2*tailWindow): the
	// fingerprint of the next publish comes from memory, not the file.
	tail    []byte
	tailOff uint64
}

var (
	nextKey    = []byte("next")
	flushedKey = []byte("flushed")
	pathKey    = []byte("path")
	tailKey    = []byte("tail") // offsetRecord: the committed size and its fingerprint
	newline    = []byte{'\n'}
)

const (
	outboxTable = "outbox"
	sinkTable   = "sink"
	noTail      = ^uint64(0) // tailOff while tail is being changed
)

// CheckConfig implements flowlet.ConfigChecker.
func (s *FileSink) CheckConfig(ic flowlet.InitContext) error { return s.configure(ic) }

func (s *FileSink) Init(ic flowlet.InitContext) error {
	if err := s.configure(ic); err != nil {
		return err
	}
	var err error
	if s.abs, err = filepath.Abs(s.path); err != nil {
		return fmt.Errorf("file_sink %q: %w", ic.Name, err)
	}
	s.tailOff = noTail
	s.f, err = os.OpenFile(s.path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("file_sink %q: cannot open output file: %w", ic.Name, err)
	}
	// One writer per file: a second app (or run) appending to it would
	// take the other's bytes for an unfinished publish and cut them off.
	if err := unix.Flock(int(s.f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		s.f.Close()
		s.f = nil
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("file_sink %q: %s is being written by another running app (it holds the file's lock); give each app its own file", ic.Name, s.path)
		}
		return fmt.Errorf("file_sink %q: lock %s: %w", ic.Name, s.path, err)
	}
	s.w = bufio.NewWriterSize(s.f, 256<<10)
	return nil
}

func (s *FileSink) configure(ic flowlet.InitContext) error {
	c := ic.Config
	if err := c.Known("path", "fsync"); err != nil {
		return err
	}
	if err := c.Require("path"); err != nil {
		return err
	}
	var err error
	if s.path, err = c.String("path", ""); err != nil {
		return err
	}
	if s.path == "" {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "path", Msg: "must not be empty"}
	}
	if s.fsync, err = c.Bool("fsync", true); err != nil {
		return err
	}
	return nil
}

func (s *FileSink) Close() error {
	if s.f != nil {
		return s.f.Close()
	}
	return nil
}

func seqKey(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

// BorrowsBatch: ProcessBatch keeps nothing of its slice of events once it
// returned (runtime.BatchBorrower: the runtime may reuse the slice).
func (*FileSink) BorrowsBatch() {}

// ProcessBatch stages the records of a step in the outbox.
func (s *FileSink) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	meta := ctx.State(sinkTable)
	next, err := getU64(meta, nextKey)
	if err != nil {
		return err
	}
	out := ctx.State(outboxTable)
	for _, ev := range evs {
		if err := out.Put(seqKey(next), ev.Payload); err != nil {
			return err
		}
		next++
	}
	return putU64(meta, nextKey, next)
}

// Publish implements runtime.Publisher: append committed records to the file.
func (s *FileSink) Publish(ctx flowlet.Context) error {
	meta := ctx.State(sinkTable)
	next, err := getU64(meta, nextKey)
	if err != nil {
		return err
	}
	v, ok, err := meta.Get(flushedKey)
	if err != nil {
		return err
	}
	var flushed, off uint64
	if ok && len(v) == 16 {
		flushed, off = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
	}
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	size := uint64(fi.Size())
	if !ok || (off == 0 && flushed == next && size > 0) {
		// The sink's first publish on this store writes nothing: it
		// records the file's size (someone else's data, which stays: the
		// sink appends) and commits, so that once the sink has written,
		// bytes past the recorded size are always its own unfinished
		// publish, to be cut off — also when the first publish that wrote
		// died before its commit (the file then held only the sink's
		// bytes, and taking them for someone else's duplicated them).
		// Output that is still empty with no publish unfinished (nothing
		// staged) is no output at all: a file at the path is taken the
		// same way.
		return s.adopt(meta, flushed, size)
	}
	if !s.checked {
		if err := s.check(meta, off, size); err != nil {
			return err
		}
	}
	if size < off {
		return flowlet.Permanent(fmt.Errorf("file_sink: %s is %d bytes but %d bytes were committed to it: the file was truncated or replaced", s.path, size, off))
	}
	if size > off {
		// A publish that did not commit: drop its bytes, they come again.
		if err := s.f.Truncate(int64(off)); err != nil {
			return fmt.Errorf("file_sink: truncate %s to %d: %w", s.path, off, err)
		}
	}
	if flushed >= next {
		return nil
	}
	if s.tailOff != off { // a publish whose commit failed moved it on
		s.tailOff = noTail
		if s.tail, err = readBefore(s.f, int64(off), s.tail); err != nil {
			return fmt.Errorf("file_sink: read %s: %w", s.path, err)
		}
		s.tailOff = off
	}
	if _, err := s.f.Seek(int64(off), io.SeekStart); err != nil {
		return err
	}
	s.w.Reset(s.f)
	out := ctx.State(outboxTable)
	it := out.Scan(flowlet.ScanOptions{Start: seqKey(flushed), End: seqKey(next)})
	var keys [][]byte
	s.tailOff = noTail
	for it.Next() {
		s.w.Write(it.Value())
		s.w.WriteByte('\n')
		s.keep(it.Value())
		s.keep(newline)
		off += uint64(len(it.Value()) + 1)
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	err = it.Err()
	it.Close()
	if err != nil {
		return err
	}
	s.tailOff = off
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("file_sink: write %s: %w", s.path, err)
	}
	if s.fsync {
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("file_sink: sync %s: %w", s.path, err)
		}
	}
	for _, k := range keys {
		if err := out.Delete(k); err != nil {
			return err
		}
	}
	if s.pathMoved { // until a run finds it recorded
		if err := meta.Put(pathKey, []byte(s.abs)); err != nil {
			return err
		}
	}
	if err := meta.Put(tailKey, offsetRecord(off, fingerprint(s.tail))); err != nil {
		return err
	}
	return meta.Put(flushedKey, flushedRecord(next, off))
}

// adopt records the file as it is — its size, the fingerprint of its last
// bytes, its path — as the start of the sink's output, in a commit of its own.
func (s *FileSink) adopt(meta flowlet.Table, flushed, size uint64) error {
	s.tailOff = noTail
	var err error
	if s.tail, err = readBefore(s.f, int64(size), s.tail); err != nil {
		return fmt.Errorf("file_sink: read %s: %w", s.path, err)
	}
	s.tailOff = size
	if err := meta.Put(pathKey, []byte(s.abs)); err != nil {
		return err
	}
	if err := meta.Put(tailKey, offsetRecord(size, fingerprint(s.tail))); err != nil {
		return err
	}
	return meta.Put(flushedKey, flushedRecord(flushed, size))
}

// check finds out, once per run, whether the file holds the committed
// output (off bytes): the sink truncates it to that size and appends to
// it only then.
func (s *FileSink) check(meta flowlet.Table, off, size uint64) error {
	prev, pathOK, err := meta.Get(pathKey)
	if err != nil {
		return err
	}
	moved, gone := false, false
	if pathOK && string(prev) != s.abs {
		exists, same := sameFileAs(string(prev), s.f)
		moved, gone = !same, !exists // a symlink's other name is the same file
	}
	if moved && !gone && off > 0 {
		// The size recorded is the other file's: checking it against
		// this one would blame a truncation that did not happen.
		return flowlet.Permanent(fmt.Errorf("file_sink: the %d bytes committed so far went to %s, which still exists, and path is now %s; set path back, or move the file there", off, prev, s.abs))
	}
	tv, fpOK, err := meta.Get(tailKey)
	if err != nil {
		return err
	}
	// A fingerprint of this very size (an older flowrun moved the size on
	// without one); one of no bytes proves nothing.
	fpOK = fpOK && len(tv) == 16 && binary.BigEndian.Uint64(tv) == off && off > 0
	var why string
	switch {
	case size < off && !moved:
		return flowlet.Permanent(fmt.Errorf("file_sink: %s is %d bytes but %d bytes were committed to it: the file was truncated or replaced; put the output back, or use a new data directory to start a new output", s.path, size, off))
	case size < off:
		why = fmt.Sprintf("it is %d bytes", size)
	case fpOK:
		same, err := matches(s.f, int64(size), int64(off), binary.BigEndian.Uint64(tv[8:]))
		if err != nil {
			return fmt.Errorf("file_sink: read %s: %w", s.path, err)
		}
		if !same {
			why = fmt.Sprintf("its last %d bytes before offset %d are not the output's", min(off, tailWindow), off)
		}
	case moved && off == 0 && size > 0:
		why = fmt.Sprintf("it holds %d bytes, and the output committed so far is empty", size)
	case moved && size != off:
		// A store from before fingerprints: only the exact size is
		// some evidence.
		why = fmt.Sprintf("it is %d bytes, and with no fingerprint of the output recorded only a file of exactly the committed size is taken for it", size)
	}
	if why != "" && !moved {
		return flowlet.Permanent(fmt.Errorf("file_sink: %s is not the output committed to it (%s): it was replaced or rewritten; the sink neither truncates nor appends to a file it cannot tell is its own: move it aside and put the output back, or use a new data directory to start a new output", s.abs, why))
	}
	if why != "" {
		where := string(prev)
		if gone {
			where += ", which no longer exists"
		}
		return flowlet.Permanent(fmt.Errorf("file_sink: path is now %s, but the %d bytes of output committed so far went to %s, and %s is not that output (%s); the sink neither truncates nor appends to a file it cannot tell is its own: set path back to the output's file, or move %s aside and put the output there (or use a new data directory to start a new output)", s.abs, off, where, s.abs, why, s.abs))
	}
	s.tailOff = noTail
	if s.tail, err = readBefore(s.f, int64(off), s.tail); err != nil {
		return fmt.Errorf("file_sink: read %s: %w", s.path, err)
	}
	s.tailOff = off
	if !fpOK && off > 0 { // from now on the store has one
		if err := meta.Put(tailKey, offsetRecord(off, fingerprint(s.tail))); err != nil {
			return err
		}
	}
	s.pathMoved = !pathOK || string(prev) != s.abs
	if s.pathMoved {
		if err := meta.Put(pathKey, []byte(s.abs)); err != nil {
			return err
		}
	}
	s.checked = true
	return nil
}

// keep appends b, just written after the file's tail, to s.tail.
func (s *FileSink) keep(b []byte) {
	if len(b) >= tailWindow {
		s.tail = append(s.tail[:0], b[len(b)-tailWindow:]...)
		return
	}
	if len(s.tail)+len(b) > 2*tailWindow {
		s.tail = s.tail[:copy(s.tail, s.tail[len(s.tail)-tailWindow:])]
	}
	s.tail = append(s.tail, b...)
}

// flushedRecord is the sink's progress: records below flushed are in the
// file, which is off bytes long.
func flushedRecord(flushed, off uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, flushed), off)
}

// StdoutSink writes each event's payload and "\n" to standard output once
// its step committed. A crash between the commit and the write loses those
// lines: stdout is where the guarantee ends (specs/guarantees.md).
type StdoutSink struct {
	w   io.Writer
	buf []byte
}

func (s *StdoutSink) Init(ic flowlet.InitContext) error { return ic.Config.Known() }

// CheckConfig implements flowlet.ConfigChecker.
func (s *StdoutSink) CheckConfig(ic flowlet.InitContext) error { return s.Init(ic) }

// BorrowsBatch: ProcessBatch keeps nothing of its slice of events once it
// returned (runtime.BatchBorrower: the runtime may reuse the slice).
func (*StdoutSink) BorrowsBatch() {}

func (s *StdoutSink) ProcessBatch(ctx flowlet.Context, evs []flowlet.Event) error {
	for _, ev := range evs {
		s.buf = append(s.buf, ev.Payload...)
		s.buf = append(s.buf, '\n')
	}
	return nil
}

// Committed implements runtime.StepObserver.
func (s *StdoutSink) Committed() {
	if len(s.buf) > 0 {
		s.w.Write(s.buf)
		s.buf = s.buf[:0]
	}
}

// Aborted implements runtime.StepObserver.
func (s *StdoutSink) Aborted() { s.buf = s.buf[:0] }
