package builtin

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

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
// next lines are read normally.
type FileSource struct {
	path        string
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
}

// state: "pos" = offset (8 bytes) + skipping flag (1 byte) + skip start (8 bytes).
const deadPrefix = 64 << 10

// CheckConfig implements flowlet.ConfigChecker. Whether the file can be
// read is Init's business: it may not exist yet when the app is validated.
func (s *FileSource) CheckConfig(ic flowlet.InitContext) error { return s.configure(ic) }

func (s *FileSource) Init(ic flowlet.InitContext) error {
	if err := s.configure(ic); err != nil {
		return err
	}
	s.bytesStep = 4 << 20
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
// runs the next step only once the size moved (it grew; or shrank, which
// that step reports as an error). Anything else — a partial last line, a
// failing stat — counts as a change.
func (s *FileSource) Changed() bool {
	fi, err := s.f.Stat()
	return err != nil || fi.Size() != s.idleSize
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
}

func loadPos(t flowlet.Table) (filePos, error) {
	v, ok, err := t.Get(posKey)
	if err != nil || !ok {
		return filePos{}, err
	}
	if len(v) != 17 {
		return filePos{}, fmt.Errorf("file_source: corrupt position %x", v)
	}
	return filePos{off: int64(binary.BigEndian.Uint64(v)), skipping: v[8] == 1, skipStart: int64(binary.BigEndian.Uint64(v[9:]))}, nil
}

func savePos(t flowlet.Table, p filePos) error {
	v := binary.BigEndian.AppendUint64(nil, uint64(p.off))
	if p.skipping {
		v = append(v, 1)
	} else {
		v = append(v, 0)
	}
	return t.Put(posKey, binary.BigEndian.AppendUint64(v, uint64(p.skipStart)))
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
	if err == nil && fi.Size() < p.off {
		return fmt.Errorf("file_source: %s is %d bytes, shorter than the committed offset %d: the file was truncated or replaced; use a new data directory to read it again", s.path, fi.Size(), p.off)
	}
	if err := s.seek(p.off); err != nil {
		s.initialized = false
		return err
	}
	// Whatever happens below, the reader moves; if the step aborts, the
	// committed offset differs from s.pos and the next call seeks back.
	start := p
	lines, nbytes := 0, 0
	eof := false
	for lines < s.perStep && nbytes < s.bytesStep {
		chunk, err := s.r.ReadSlice('\n')
		n := len(chunk)
		complete := err == nil
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) && !errors.Is(err, io.EOF) {
			s.initialized = false
			return fmt.Errorf("file_source: read %s at offset %d: %w", s.path, s.pos, err)
		}
		if errors.Is(err, io.EOF) {
			eof = true
			if !complete && n > 0 && s.follow {
				// A partial last line while following: wait for its "\n".
				s.initialized = false
				break
			}
		}
		s.pos += int64(n)
		if p.skipping {
			// Inside a too-long line: drop bytes up to its "\n".
			p.off = s.pos
			if complete || (eof && !s.follow && n > 0) {
				p.skipping = false
			}
			if eof {
				break
			}
			continue
		}
		if n == 0 && eof {
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
		if err := ctx.Emit("out", line); err != nil {
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
	if p != start {
		if err := savePos(t, p); err != nil {
			return err
		}
	}
	if eof && lines == 0 && p == start {
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
