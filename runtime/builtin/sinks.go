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
// outbox and records the new file size. If the process dies between the
// append and that commit, the next Publish truncates the file to the
// recorded size and appends the same records again. A file that already
// holds data when the sink first publishes on a store keeps it: the sink
// records that size (in a commit of its own) and appends after it. The
// file is locked (flock) while the app runs: one writer per file.
type FileSink struct {
	path string
	abs  string // path made absolute: recorded with the committed size
	// pathSeen: this run found abs recorded (path is read once per run).
	pathSeen bool
	fsync    bool
	f        *os.File
	w        *bufio.Writer
}

var (
	nextKey    = []byte("next")
	flushedKey = []byte("flushed")
	pathKey    = []byte("path")
)

const (
	outboxTable = "outbox"
	sinkTable   = "sink"
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

// otherFile reports whether path, where the committed output went, still
// names a file other than the one the sink writes now. A name for the same
// file (a symlink) is not another file; neither is a path that no longer
// exists (the project directory was moved, a volume mounted elsewhere):
// the size check then decides, as it always did.
func (s *FileSink) otherFile(path string) bool {
	a, err := os.Stat(path)
	if err != nil {
		return false
	}
	b, err := s.f.Stat()
	return err == nil && !os.SameFile(a, b)
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
	if !ok {
		// The sink's first publish on this store writes nothing: it
		// records the file's size (someone else's data, which stays: the
		// sink appends) and commits, so that once the sink has written,
		// bytes past the recorded size are always its own unfinished
		// publish, to be cut off — also when the first publish that wrote
		// died before its commit (the file then held only the sink's
		// bytes, and taking them for someone else's duplicated them).
		fi, err := s.f.Stat()
		if err != nil {
			return err
		}
		if err := meta.Put(pathKey, []byte(s.abs)); err != nil {
			return err
		}
		return meta.Put(flushedKey, flushedRecord(0, uint64(fi.Size())))
	}
	if !s.pathSeen {
		prev, pathOK, err := meta.Get(pathKey)
		if err != nil {
			return err
		}
		if pathOK && string(prev) != s.abs && off > 0 && s.otherFile(string(prev)) {
			// The size recorded is the other file's: checking it against
			// this one would blame a truncation that did not happen.
			return fmt.Errorf("file_sink: the %d bytes committed so far went to %s, which still exists, and path is now %s; set path back, or move the file there", off, prev, s.abs)
		}
		s.pathSeen = pathOK && string(prev) == s.abs
	}
	fi, err := s.f.Stat()
	if err != nil {
		return err
	}
	size := uint64(fi.Size())
	if size < off {
		return fmt.Errorf("file_sink: %s is %d bytes but %d bytes were committed to it: the file was truncated or replaced", s.path, size, off)
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
	if _, err := s.f.Seek(int64(off), io.SeekStart); err != nil {
		return err
	}
	s.w.Reset(s.f)
	out := ctx.State(outboxTable)
	it := out.Scan(flowlet.ScanOptions{Start: seqKey(flushed), End: seqKey(next)})
	var keys [][]byte
	for it.Next() {
		s.w.Write(it.Value())
		s.w.WriteByte('\n')
		off += uint64(len(it.Value()) + 1)
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	err = it.Err()
	it.Close()
	if err != nil {
		return err
	}
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
	if !s.pathSeen { // the next publish reads it back
		if err := meta.Put(pathKey, []byte(s.abs)); err != nil {
			return err
		}
	}
	return meta.Put(flushedKey, flushedRecord(next, off))
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
