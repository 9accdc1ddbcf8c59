package builtin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/flowrun/flowrun/flowlet"
)

func init() {
	flowlet.Register("stdin_source", func() flowlet.Flowlet { return &StdinSource{in: os.Stdin} }, flowlet.TypeInfo{
		Source: true, SingleInstance: true, Outputs: []string{"out"},
		Doc: "emits each line of standard input (at-most-once across crashes: stdin cannot be re-read)",
	})
}

// StdinSource emits each line of standard input (without "\n") on "out".
// A background reader collects lines, two steps' worth ahead at most (the
// rest waits in the pipe: back-pressure reaches the writer); a step emits
// those available and keeps them until the step commits (an aborted step
// emits them again). A step too large or too slow is redone with half its
// lines (SplitStep); a line that fails alone goes to the dead-letter queue
// (DropStep). Dead letters name the line by its number in the run's
// standard input (from 1).
// Lines read but not committed when the process dies are lost: standard
// input cannot be re-read (specs/guarantees.md). On a graceful stop the
// runtime commits them (runtime.StopDrainer: StopTaking).
type StdinSource struct {
	in      io.Reader
	maxLine int
	perStep int

	mu       sync.Mutex
	pending  []stdinLine
	aheadB   int // lineCost of pending and dead
	inflight []stdinLine
	dead     []stdinLine // too-long line prefixes
	deadIn   []stdinLine
	lines    int64 // lines the reader took (the last one's number)
	eof      bool
	err      error
	ready    chan struct{}
	room     chan struct{} // a step took lines: the reader may read on
	done     chan struct{} // closed when the reader ends
	closed   chan struct{} // closed by Close: the reader waits for room no more
	close1   sync.Once

	// StopTaking: stopped (under mu) ends the reader once it turned the
	// lines it holds into pending ones; reading (under mu) is that it may
	// be blocked reading the input, and stopNow wakes it waiting for room.
	stopped bool
	reading bool
	stopNow chan struct{}
	stop1   sync.Once

	// After a step too large or too slow (runtime.StepSplitter): limit
	// bounds its lines; aborted is the last aborted step's lines (back in
	// pending and dead), abortedDrop whether it was drop's step; drop is
	// a line given up (DropStep), dead-lettered in a step of its own.
	name        string
	limit       stepLimit
	aborted     int
	abortedDead bool // and its line was a too-long line's prefix
	abortedDrop bool
	drop        *droppedRecord
	dropLine    stdinLine
	dropIn      bool // the step in flight is drop's
}

// stdinAheadBytes bounds the memory the reader holds ahead of the steps
// (with two steps' worth of lines): lineCost of each line.
const stdinAheadBytes = 8 << 20

// lineCost is what a line read ahead holds: its bytes and its slice.
func lineCost(l stdinLine) int { return len(l.b) + 32 }

// stdinLine is a line read, with its number in this run's standard input
// (from 1): a dead letter names it, so that the line can be found.
type stdinLine struct {
	b  []byte
	no int64
}

// name is how a dead letter names the line.
func (l stdinLine) name() string { return fmt.Sprintf("line %d of standard input", l.no) }

// CheckConfig implements flowlet.ConfigChecker.
func (s *StdinSource) CheckConfig(ic flowlet.InitContext) error { return s.configure(ic) }

func (s *StdinSource) Init(ic flowlet.InitContext) error {
	if err := s.configure(ic); err != nil {
		return err
	}
	s.name = ic.Name
	s.ready = make(chan struct{}, 1)
	s.room = make(chan struct{}, 1)
	s.done = make(chan struct{})
	s.closed = make(chan struct{})
	s.stopNow = make(chan struct{})
	go s.read()
	return nil
}

func (s *StdinSource) configure(ic flowlet.InitContext) error {
	c := ic.Config
	if err := c.Known("max_line_bytes", "lines_per_step"); err != nil {
		return err
	}
	var err error
	if s.maxLine, err = c.Int("max_line_bytes", 1<<20); err != nil {
		return err
	}
	if s.perStep, err = c.Int("lines_per_step", 4096); err != nil {
		return err
	}
	if s.maxLine < 1 || s.maxLine > 1<<20 || s.perStep < 1 {
		return &flowlet.ConfigError{Flowlet: ic.Name, Msg: "max_line_bytes must be in [1, 1MiB] and lines_per_step >= 1"}
	}
	return nil
}

func (s *StdinSource) read() {
	defer close(s.done)
	r := bufio.NewReaderSize(stopGate{s}, 64<<10)
	var line []byte
	tooLong := false
	for {
		select {
		case <-s.closed:
			return
		default:
		}
		chunk, err := r.ReadSlice('\n')
		if errors.Is(err, errStopped) { // a line partly read is lost
			return
		}
		complete := err == nil
		body := chunk
		if complete {
			body = chunk[:len(chunk)-1]
		}
		if !tooLong {
			line = append(line, body...)
			if len(line) > s.maxLine {
				tooLong = true
				line = line[:min(len(line), deadPrefix)]
			}
		}
		atEOF := errors.Is(err, io.EOF)
		// A last line without "\n" may end where a full buffer did: the
		// end of input then comes with no bytes.
		if complete || (atEOF && (len(chunk) > 0 || len(line) > 0 || tooLong)) {
			s.mu.Lock()
			// Past the bound at a stop: what is buffered (64 KiB at most).
			for !s.stopped && (len(s.pending)+len(s.dead) >= 2*min(s.perStep, stdinAheadBytes) || s.aheadB >= stdinAheadBytes) {
				s.mu.Unlock()
				select {
				case <-s.room:
				case <-s.stopNow:
				case <-s.closed: // no step will take lines: end
					return
				}
				s.mu.Lock()
			}
			s.lines++
			l := stdinLine{b: line, no: s.lines}
			s.aheadB += lineCost(l)
			if tooLong {
				s.dead = append(s.dead, l)
			} else {
				s.pending = append(s.pending, l)
			}
			s.mu.Unlock()
			line, tooLong = nil, false
			s.signal()
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			s.mu.Lock()
			s.eof = true
			if !atEOF {
				s.err = err
			}
			s.mu.Unlock()
			s.signal()
			return
		}
	}
}

// Close implements flowlet.Closer: the reader, if it waits for read-ahead
// room, ends; one blocked reading standard input ends when that read
// returns (a read of stdin cannot be interrupted).
func (s *StdinSource) Close() error {
	if s.closed != nil {
		s.close1.Do(func() { close(s.closed) })
	}
	return nil
}

// errStopped ends the reader at StopTaking: no more reads of the input.
var errStopped = errors.New("stdin_source: stopped taking input")

// stopGate is the reader's input: after StopTaking it reads no more, and
// a read under way at StopTaking (not waited for) returns nothing.
type stopGate struct{ s *StdinSource }

func (g stopGate) Read(p []byte) (int, error) {
	s := g.s
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return 0, errStopped
	}
	s.reading = true
	s.mu.Unlock()
	n, err := s.in.Read(p)
	s.mu.Lock()
	s.reading = false
	lost := s.stopped
	s.mu.Unlock()
	if lost {
		return 0, errStopped
	}
	return n, err
}

// StopTaking implements runtime.StopDrainer: the reader reads standard
// input no more, and every whole line it read is pending for the steps
// when StopTaking returns, also those past the read-ahead bound (64 KiB
// at most, its buffer). A reader in a read (it held no whole line) is not
// waited for, blocked or not: what that read returns is lost, as what is
// still in the pipe is (one read, 64 KiB at most), and so is a line
// partly read.
func (s *StdinSource) StopTaking() {
	if s.stopNow == nil { // not initialized: no reader
		return
	}
	s.mu.Lock()
	s.stopped = true
	reading := s.reading
	s.mu.Unlock()
	s.stop1.Do(func() { close(s.stopNow) })
	if !reading {
		<-s.done // it turns what it holds into lines, then ends
	}
}

func (s *StdinSource) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Ready implements runtime.Waker.
func (s *StdinSource) Ready() <-chan struct{} { return s.ready }

func (s *StdinSource) Generate(ctx flowlet.Context) error {
	if d := s.drop; d != nil {
		if d.stop != nil {
			return d.stop
		}
		// The line's dead-letter record alone, counted as a line.
		d.inStep, s.dropIn = true, true
		if err := deadLetterDropped(ctx, s.name, s.dropLine.name(), s.dropLine.b, d.cause); err != nil {
			return err
		}
		return s.count(ctx, 1)
	}
	s.mu.Lock()
	limit := s.limit.of(s.perStep)
	nd := min(len(s.dead), limit)
	s.deadIn = append(s.deadIn[:0], s.dead[:nd]...)
	s.dead = s.dead[nd:]
	n := min(len(s.pending), limit-nd)
	s.inflight = append(s.inflight[:0], s.pending[:n]...)
	s.pending = s.pending[n:]
	for _, l := range s.inflight {
		s.aheadB -= lineCost(l)
	}
	for _, l := range s.deadIn {
		s.aheadB -= lineCost(l)
	}
	eof, rerr := s.eof && len(s.pending) == 0 && len(s.dead) == 0, s.err
	s.mu.Unlock()
	select {
	case s.room <- struct{}{}:
	default:
	}
	for _, l := range s.deadIn {
		dl, ok := ctx.(deadLetterer)
		if !ok {
			return errors.New("stdin_source: line longer than max_line_bytes")
		}
		if err := dl.DeadLetter(l.b, fmt.Sprintf("%s is longer than max_line_bytes (%d); first %d bytes kept", l.name(), s.maxLine, len(l.b))); err != nil {
			return err
		}
	}
	for _, l := range s.inflight {
		if err := ctx.Emit("out", l.b); err != nil {
			return err
		}
	}
	if len(s.inflight) > 0 || len(s.deadIn) > 0 {
		return s.count(ctx, len(s.inflight)+len(s.deadIn))
	}
	if eof {
		if rerr != nil {
			return fmt.Errorf("stdin_source: read: %w", rerr)
		}
		return flowlet.ErrEndOfInput
	}
	return flowlet.ErrIdle
}

// count adds a step's n lines to the lines taken, in its state.
func (s *StdinSource) count(ctx flowlet.Context, n int) error {
	t := ctx.State(posTable)
	c, err := getU64(t, posKey)
	if err != nil {
		return err
	}
	return putU64(t, posKey, c+uint64(n))
}

// Committed implements runtime.StepObserver.
func (s *StdinSource) Committed() {
	if s.dropIn {
		s.drop, s.dropLine, s.dropIn = nil, stdinLine{}, false
	} else if len(s.inflight)+len(s.deadIn) > 0 {
		s.limit.committed(s.perStep)
	}
	s.inflight = s.inflight[:0]
	s.deadIn = s.deadIn[:0]
}

// SplitStep implements runtime.StepSplitter: the step just aborted was too
// large or too slow; the next takes half its lines, if it had several.
func (s *StdinSource) SplitStep() bool { return !s.abortedDrop && s.limit.split(s.aborted) }

// DropStep implements runtime.StepSplitter: the line of the step just
// aborted, too large or too slow on its own, goes to the dead-letter queue
// in a step of its own (unlike the file_source's and generator's too slow
// one: the source cannot stop without losing it). Failing again there, the
// source stops with a RecordFailsAloneError (standard input cannot be
// read again: the line is lost with the source).
func (s *StdinSource) DropStep(err error) {
	if s.abortedDrop {
		s.drop = s.drop.dropped(true, s.name, s.dropLine.name(), err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var line stdinLine
	switch {
	case s.aborted != 1:
		return
	case len(s.dead) > 0 && s.abortedDead:
		line, s.dead = s.dead[0], s.dead[1:]
	case len(s.pending) > 0:
		line, s.pending = s.pending[0], s.pending[1:]
	default:
		return
	}
	s.aheadB -= lineCost(line)
	// Too slow alone as well: stopping would lose it and every line after
	// it (standard input cannot be read again), the dead-letter queue not.
	s.drop, s.dropLine = &droppedRecord{cause: err}, line
}

// Aborted implements runtime.StepObserver: the lines go back to the front.
func (s *StdinSource) Aborted() {
	s.abortedDrop, s.dropIn = s.dropIn, false
	s.aborted, s.abortedDead = len(s.inflight)+len(s.deadIn), len(s.deadIn) > 0
	s.mu.Lock()
	s.pending = append(append([]stdinLine(nil), s.inflight...), s.pending...)
	s.dead = append(append([]stdinLine(nil), s.deadIn...), s.dead...)
	for _, l := range s.inflight {
		s.aheadB += lineCost(l)
	}
	for _, l := range s.deadIn {
		s.aheadB += lineCost(l)
	}
	s.mu.Unlock()
	s.inflight = s.inflight[:0]
	s.deadIn = s.deadIn[:0]
}
