package builtin

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/flowrun/flowrun/flowlet"
)

func init() {
	flowlet.Register("file_source", func() flowlet.Flowlet { return &FileSource{} }, flowlet.TypeInfo{
		Source: true, SingleInstance: true, Outputs: []string{"out"},
		Doc: "reads lines of a file (or follows a growing one); the byte offset commits with the lines",
	})
}

// FileSource emits each line of a file (without its "\n") on "out".
//
// A line is the bytes up to "\n"; a final line without "\n" counts at end of
// file unless following. The committed state is the byte offset after the
// last emitted line (plus a flag while a too-long line is being skipped), in
// the same transaction as the lines, so a restart resumes exactly after the
// last committed line. Lines longer than max_line_bytes go to the
// dead-letter queue (their first 64 KiB, with offset and length) and the
// next lines are read normally. A step too large or too slow is redone
// with half its lines (SplitStep); a line too large alone goes to the
// dead-letter queue too, and one too slow alone stops the source (DropStep).
//
// With the offset the source records the fingerprint of the bytes before it
// (their last 4 KiB), and once the file's absolute path: a run reads on from
// the offset only in a file that holds those bytes. Under a changed path it
// stops with an error otherwise. At the same path, a file that does not (it
// was replaced, or truncated below the offset) is read from its start while
// following — rotation, as tail -F does — and stops the source with an
// error when not. While following, a new file at the path (another inode)
// is switched to once the old one is read to its end; it is read on from
// the offset if it holds the same bytes before it (an editor's save), else
// from its start.
type FileSource struct {
	name        string
	path        string
	abs         string // path made absolute: recorded with the offset
	follow      bool
	maxLine     int
	perStep     int
	bytesStep   int
	f           *os.File
	r           *bufio.Reader
	pos         int64 // offset of r's next byte
	line        []byte
	initialized bool
	idleSize    int64 // following: the committed offset when the last idle step found the file ending there; -1 otherwise
	// checked: the position is known to belong to the file read (the
	// run's first step found so, or set it to the start); want is the
	// position the last step left, so that a step that finds another
	// one (the last step aborted) checks again.
	checked bool
	want    filePos
	// switched: following, the file was switched to a new one at the
	// path after the old one was read to its end.
	switched bool
	fpBuf    []byte
	// After a step too large or too slow (runtime.StepSplitter): limit
	// bounds its lines; last is the last step's lines and its start;
	// drop, the line at dropOff to dead-letter (DropStep).
	limit     stepLimit
	lastLines int
	lastStart int64
	drop      *droppedRecord
	dropOff   int64
}

// state: "pos" = offset (8 bytes) + skipping flag (1 byte) + skip start (8
// bytes) + fingerprint of the bytes before the offset (8 bytes; absent in
// positions written before it was recorded); "path" = the file's absolute path.
const deadPrefix = 64 << 10

// CheckConfig implements flowlet.ConfigChecker. Whether the file can be
// read is Init's business: it may not exist yet when the app is validated.
func (s *FileSource) CheckConfig(ic flowlet.InitContext) error { return s.configure(ic) }

func (s *FileSource) Init(ic flowlet.InitContext) error {
	err := s.configure(ic)
	if err != nil {
		return err
	}
	s.bytesStep = 4 << 20
	s.name = ic.Name
	if s.abs, err = filepath.Abs(s.path); err != nil {
		return fmt.Errorf("file_source %q: %w", ic.Name, err)
	}
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("file_source %q: cannot read input file: %w", ic.Name, err)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return fmt.Errorf("file_source %q: input %s is a directory, not a file", ic.Name, s.path)
	}
	s.f = f
	s.r = bufio.NewReaderSize(f, 256<<10)
	return nil
}

func (s *FileSource) configure(ic flowlet.InitContext) error {
	c := ic.Config
	if err := c.Known("path", "follow", "max_line_bytes", "lines_per_step"); err != nil {
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
	if s.follow, err = c.Bool("follow", false); err != nil {
		return err
	}
	if s.maxLine, err = c.Int("max_line_bytes", 1<<20); err != nil {
		return err
	}
	if s.perStep, err = c.Int("lines_per_step", 4096); err != nil {
		return err
	}
	if s.maxLine < 1 || s.maxLine > 1<<20 {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "max_line_bytes", Msg: fmt.Sprintf("%d not in [1, %d]", s.maxLine, 1<<20)}
	}
	if s.perStep < 1 {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "lines_per_step", Msg: "must be at least 1"}
	}
	return nil
}

// Changed implements runtime.Poller while following: when the last idle
// step found the file ending exactly at the committed offset, the runtime
// runs the next step only once the size moved (it grew; or shrank: the
// file is read again from its start) or the path names another file (a
// rotation). Anything else — a partial last line, a failing stat — counts
// as a change.
func (s *FileSource) Changed() bool {
	fi, err := s.f.Stat()
	if err != nil || fi.Size() != s.idleSize {
		return true
	}
	st, err := os.Stat(s.path)
	return err == nil && !os.SameFile(st, fi)
}

func (s *FileSource) Close() error {
	if s.f != nil {
		return s.f.Close()
	}
	return nil
}

type filePos struct {
	off       int64
	skipping  bool
	skipStart int64
	hasFP     bool   // fp was recorded (always, since it exists)
	fp        uint64 // fingerprint of the bytes before off
}

func loadPos(t flowlet.Table) (filePos, error) {
	v, ok, err := t.Get(posKey)
	if err != nil || !ok {
		return filePos{hasFP: true, fp: fingerprint(nil)}, err
	}
	if len(v) != 17 && len(v) != 25 {
		return filePos{}, fmt.Errorf("file_source: corrupt position %x", v)
	}
	p := filePos{off: int64(binary.BigEndian.Uint64(v)), skipping: v[8] == 1, skipStart: int64(binary.BigEndian.Uint64(v[9:]))}
	if len(v) == 25 {
		p.hasFP, p.fp = true, binary.BigEndian.Uint64(v[17:])
	}
	return p, nil
}

func savePos(t flowlet.Table, p filePos) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(p.off))
	if p.skipping {
		v = append(v, 1)
	} else {
		v = append(v, 0)
	}
	v = binary.BigEndian.AppendUint64(v, uint64(p.skipStart))
	if p.hasFP {
		v = binary.BigEndian.AppendUint64(v, p.fp)
	}
	return t.Put(posKey, v)
}

// check finds out whether the committed position p belongs to the file
// read (of size bytes): it does if the file holds the bytes fingerprinted
// before the offset. If it does not, a changed path is an error; the same
// path, following, is a rotated file, read from its start (p is reset);
// not following, an error. The path is recorded when it changed.
func (s *FileSource) check(ctx flowlet.Context, t flowlet.Table, p *filePos, size int64) error {
	prev, pathOK, err := t.Get(pathKey)
	if err != nil {
		return err
	}
	moved := false
	if pathOK && string(prev) != s.abs {
		_, same := sameFileAs(string(prev), s.f)
		moved = !same // a symlink's other name is the same file
	}
	if p.off > 0 {
		ours := size >= p.off && !moved // a position from before fingerprints: as before
		why := fmt.Sprintf("it is %d bytes", size)
		if p.hasFP && size >= p.off {
			if ours, err = matches(s.f, size, p.off, p.fp); err != nil {
				return fmt.Errorf("file_source: read %s: %w", s.path, err)
			}
			why = fmt.Sprintf("its last %d bytes before that offset are not the ones read", min(p.off, tailWindow))
		} else if size >= p.off {
			why = "no fingerprint of the bytes read was recorded to tell"
		}
		switch {
		case ours:
		case moved:
			return flowlet.Permanent(fmt.Errorf("file_source: path is now %s, but the committed offset %d is in %s, and %s is not that file (%s): reading it on from that offset would skip its first lines; set path back to %s to read on from the offset, or use a new data directory to read %s from its start", s.abs, p.off, prev, s.abs, why, prev, s.abs))
		case s.follow && s.switched:
			ctx.Logger().Info("file_source: a new file is at the path (rotated): reading it from its start; the old one was read to its end",
				"path", s.abs, "old_offset", p.off)
			*p = filePos{hasFP: true, fp: fingerprint(nil)}
			return nil // checked once the reset committed
		case s.follow:
			ctx.Logger().Warn("file_source: the file is not the one the committed offset belongs to (rotated, replaced or truncated): reading it from its start; lines the old file had past the offset, if any, were not read",
				"path", s.abs, "offset", p.off, "size", size, "reason", why)
			*p = filePos{hasFP: true, fp: fingerprint(nil)}
			return nil // checked once the reset committed
		case size < p.off:
			return flowlet.Permanent(fmt.Errorf("file_source: %s is %d bytes, shorter than the committed offset %d: the file was truncated or replaced; use a new data directory to read it again", s.path, size, p.off))
		default:
			return flowlet.Permanent(fmt.Errorf("file_source: %s is not the file the committed offset %d belongs to (%s): it was replaced or rewritten; use a new data directory to read it from its start", s.abs, p.off, why))
		}
	}
	if !pathOK || string(prev) != s.abs {
		if err := t.Put(pathKey, []byte(s.abs)); err != nil {
			return err
		}
	}
	s.checked, s.switched = true, false
	return nil
}

// switchFile, following, opens the file the path names now if that is
// not the one read (rotation, an editor's save) and reports whether it
// did; the next step checks the position against it. The old file was
// read to its end, but for a last line without "\n", if any.
func (s *FileSource) switchFile(ctx flowlet.Context, old os.FileInfo, off int64) bool {
	st, err := os.Stat(s.path)
	if err != nil || old == nil || os.SameFile(st, old) || st.IsDir() {
		return false // gone for now: the old file may grow yet
	}
	if cur, err := s.f.Stat(); err != nil || cur.Size() != old.Size() {
		return false // the old file moved on: read it first
	}
	f, err := os.Open(s.path)
	if err != nil {
		return false
	}
	if old.Size() > off {
		ctx.Logger().Warn("file_source: a new file is at the path; the old one's last line, without \"\\n\", is not read",
			"path", s.abs, "offset", off, "bytes", old.Size()-off)
	}
	s.f.Close()
	s.f = f
	s.r.Reset(f)
	s.initialized = false
	s.checked, s.switched = false, true
	return true
}

// seek positions the reader at off (after an abort or at start).
func (s *FileSource) seek(off int64) error {
	if s.initialized && s.pos == off {
		return nil
	}
	if _, err := s.f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("file_source: seek %s to %d: %w", s.path, off, err)
	}
	s.r.Reset(s.f)
	s.pos = off
	s.initialized = true
	return nil
}

func (s *FileSource) Generate(ctx flowlet.Context) error {
	t := ctx.State(posTable)
	p, err := loadPos(t)
	if err != nil {
		return err
	}
	fi, err := s.f.Stat()
	if err != nil {
		return fmt.Errorf("file_source: stat %s: %w", s.path, err)
	}
	recheck := !s.checked || p != s.want || fi.Size() < p.off
	if !recheck && s.follow && p.off > 0 && p.hasFP {
		// A file truncated in place may have grown past the offset again
		// since the last step (copytruncate), whether or not that step
		// read to the end: the bytes before the offset say (one 4 KiB
		// read; the reader's buffer of the old file is dropped on a
		// mismatch).
		if p.off <= fi.Size() {
			if s.fpBuf, err = readBefore(s.f, p.off, s.fpBuf); err != nil {
				return fmt.Errorf("file_source: read %s: %w", s.path, err)
			}
			recheck = fingerprint(s.fpBuf) != p.fp
		}
	}
	loaded := p
	if s.lastLines > 0 && loaded == s.want {
		s.limit.committed(s.perStep) // the last step committed
	}
	if recheck {
		s.initialized = false
		if err := s.check(ctx, t, &p, fi.Size()); err != nil {
			return err
		}
	}
	// By the offset the step starts at, not the committed one: a rotated
	// file's first step starts at 0 until it commits.
	if s.drop != nil && p.off != s.dropOff {
		s.drop = nil // dead-lettered (or the file changed)
	}
	if err := s.seek(p.off); err != nil {
		s.initialized = false
		return err
	}
	// Whatever happens below, the reader moves; if the step aborts, the
	// committed offset differs from s.pos and the next call seeks back.
	start := p
	lines, nbytes := 0, 0
	limit := s.limit.of(s.perStep)
	drop := s.drop
	if drop != nil && p.off == s.dropOff {
		if drop.stop != nil {
			return drop.stop
		}
		limit, drop.inStep = 1, true // the line's dead-letter record alone
	} else {
		drop = nil
	}
	s.lastLines, s.lastStart = 0, p.off
	eof := false
	for lines < limit && nbytes < s.bytesStep {
		chunk, err := s.r.ReadSlice('\n')
		n := len(chunk)
		complete := err == nil
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !errors.Is(err, io.EOF) {
			s.initialized = false
			return fmt.Errorf("file_source: read %s at offset %d: %w", s.path, s.pos, err)
		}
		if errors.Is(err, io.EOF) {
			eof = true
			if !complete && (n > 0 || len(s.line) > 0) && s.follow {
				// A partial last line while following: wait for its "\n".
				s.initialized = false
				break
			}
		}
		s.pos += int64(n)
		if p.skipping {
			// Inside a too-long line: drop bytes up to its "\n".
			p.off = s.pos
			if complete || (eof && !s.follow) {
				p.skipping = false
			}
			if eof {
				break
			}
			continue
		}
		// At the end, a last line without "\n" may be collected already:
		// its bytes filled the reader's buffer exactly, and the end of the
		// file came with none.
		if n == 0 && eof && len(s.line) == 0 {
			break
		}
		body := chunk
		if complete {
			body = chunk[:n-1]
		}
		if len(s.line)+len(body) > s.maxLine {
			// Too long: dead-letter its prefix, skip the rest.
			prefix := append(s.line, body...)
			if len(prefix) > deadPrefix {
				prefix = prefix[:deadPrefix]
			}
			reason := fmt.Sprintf("line at offset %d of %s is longer than max_line_bytes (%d); first %d bytes kept", p.off, s.path, s.maxLine, len(prefix))
			if dl, ok := ctx.(deadLetterer); ok {
				if err := dl.DeadLetter(prefix, reason); err != nil {
					return err
				}
			} else {
				return errors.New(reason)
			}
			s.line = s.line[:0]
			p.skipStart = p.off
			p.off = s.pos
			p.skipping = !complete && !(eof && !s.follow)
			lines++
			if eof {
				break
			}
			continue
		}
		if !complete && !eof {
			s.line = append(s.line, body...) // buffer full: the line goes on
			continue
		}
		line := body
		if len(s.line) > 0 {
			s.line = append(s.line, body...)
			line = s.line
		}
		if drop != nil {
			what := fmt.Sprintf("line at offset %d of %s", p.off, s.path)
			if err := deadLetterDropped(ctx, s.name, what, line, drop.cause); err != nil {
				return err
			}
		} else if err := ctx.Emit("out", line); err != nil {
			return err
		}
		s.line = s.line[:0]
		p.off = s.pos
		lines++
		nbytes += len(line)
		if eof {
			break
		}
	}
	if len(s.line) > 0 {
		// Stopped inside a long line: re-read it next time from its start.
		s.line = s.line[:0]
		s.initialized = false
	}
	if p.off != start.off || !p.hasFP {
		if s.fpBuf, err = readBefore(s.f, p.off, s.fpBuf); err != nil {
			s.initialized = false
			return fmt.Errorf("file_source: read %s: %w", s.path, err)
		}
		p.hasFP, p.fp = true, fingerprint(s.fpBuf)
	}
	if p != loaded {
		if err := savePos(t, p); err != nil {
			return err
		}
	}
	s.want, s.lastLines = p, lines
	if eof && lines == 0 && p == start {
		if s.follow && s.switchFile(ctx, fi, p.off) {
			return nil
		}
		if s.follow {
			// Only a file that ends exactly at the committed offset can
			// skip polls until it grows: past a partial last line, a
			// writer may complete it in place (preallocated space, mmap)
			// without growing the file, so every poll steps.
			s.idleSize = -1
			if fi != nil && fi.Size() == p.off {
				s.idleSize = p.off
			}
			return flowlet.ErrIdle
		}
		return flowlet.ErrEndOfInput
	}
	return nil
}

// Committed implements runtime.StepObserver (see Aborted).
func (s *FileSource) Committed() {}

// Aborted implements runtime.StepObserver: the step may have been the one
// recording the path (check), so the next checks again. A step that read
// lines is rechecked anyway (the committed position is not the one it
// left); one that read nothing (an empty file, following) was not.
func (s *FileSource) Aborted() { s.checked = false }

// SplitStep implements runtime.StepSplitter: the step just aborted was too
// large or too slow; the next takes half its lines, if it had several.
// The offset commits with the lines of each smaller step, as with any.
func (s *FileSource) SplitStep() bool { return s.limit.split(s.lastLines) }

// DropStep implements runtime.StepSplitter: the line of the step just
// aborted, too large on its own, goes to the dead-letter queue in the next
// step, the offset past it. Too slow on its own, or failing again there,
// it stops the source with a RecordFailsAloneError (a restart reads it
// again).
func (s *FileSource) DropStep(err error) {
	if s.lastLines == 0 {
		return // no line to give up (the offset moved inside a too-long line): the next step is an ordinary one
	}
	what := fmt.Sprintf("line at offset %d of %s", s.lastStart, s.path)
	s.drop = s.drop.dropped(s.dropOff == s.lastStart, s.name, what, err)
	s.dropOff = s.lastStart
}
