package builtin

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// TestStdinSourceStopTakingFlushes: StopTaking while the reader waits for
// read-ahead room: the line it read and could not add yet is pending too,
// nothing more is read, and the steps then emit every line read, in
// order, and idle (the input has not ended).
func TestStdinSourceStopTakingFlushes(t *testing.T) {
	const perStep = 3
	s, ctx, _ := readAhead(t, 1000, perStep)
	waitReadDone(t, s, 2*perStep+1)
	s.StopTaking()
	got, err := stepsAfterStop(t, ctx, s)
	if !errors.Is(err, flowlet.ErrIdle) {
		t.Fatalf("last step: %v, want ErrIdle", err)
	}
	read := s.in.(*lineReader).i // the reader has ended: no race
	if read != 2*perStep+1 {
		t.Errorf("%d lines read, want %d: two steps' worth and the one waiting for room", read, 2*perStep+1)
	}
	if len(got) != read {
		t.Fatalf("%d lines emitted after the stop, want the %d read", len(got), read)
	}
	for i, l := range got {
		if l != fmt.Sprintf("l%d", i) {
			t.Fatalf("line %d is %q, want l%d", i, l, i)
		}
	}
}

// waitReadDone returns once s's reader (over a lineReader) has read lines
// lines and is not in a read: readAhead returns as soon as the lines of two
// steps are pending, and the reader's read of the next line, under way at
// a StopTaking, would be lost, as a read blocked then is.
func waitReadDone(t *testing.T, s *StdinSource, lines int) {
	t.Helper()
	hang := time.After(time.Minute) // a hang detector, not a timing assertion
	for {
		s.mu.Lock()
		// i is written in a read only: not while reading is false.
		done := !s.reading && s.in.(*lineReader).i >= lines
		s.mu.Unlock()
		if done {
			return
		}
		select {
		case <-hang:
			t.Fatalf("the reader has not read %d lines in a minute", lines)
		case <-time.After(time.Millisecond):
		}
	}
}

// blockedReader hands over first in one Read, then blocks the next Read
// until later is sent: that Read returns it, and the one after io.EOF.
type blockedReader struct {
	first   string
	blocked chan struct{} // closed when the second Read blocks
	later   chan string
	reads   int
}

func (r *blockedReader) Read(p []byte) (int, error) {
	r.reads++
	switch r.reads {
	case 1:
		return copy(p, r.first), nil
	case 2:
		close(r.blocked)
		return copy(p, <-r.later), nil
	}
	return 0, io.EOF
}

// TestStdinSourceStopTakingBlockedRead: StopTaking does not wait for a
// read of standard input that blocks (it may never return); the lines read
// before are emitted, and what that read returns after StopTaking is not:
// lost (documented), not emitted after the steps drained.
func TestStdinSourceStopTakingBlockedRead(t *testing.T) {
	r := &blockedReader{first: "a\nb\n", blocked: make(chan struct{}), later: make(chan string)}
	s := &StdinSource{in: r}
	ctx := flowlettest.New("stdin")
	if err := ctx.Init(s, nil); err != nil {
		t.Fatal(err)
	}
	<-r.blocked
	stopped := make(chan struct{})
	go func() { s.StopTaking(); close(stopped) }()
	select { // a hang detector, not a timing assertion
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("StopTaking waits for a read that blocks")
	}
	r.later <- "c\n"
	<-s.done // the reader ends after that read
	got, err := stepsAfterStop(t, ctx, s)
	if !errors.Is(err, flowlet.ErrIdle) || !sameLines(got, []string{"a", "b"}) {
		t.Fatalf("after the stop: %q then %v, want a, b then ErrIdle", got, err)
	}
}

// stepsAfterStop runs s's steps until one emits nothing and returns the
// lines emitted and that step's error.
func stepsAfterStop(t *testing.T, ctx *flowlettest.Context, s *StdinSource) ([]string, error) {
	t.Helper()
	var got []string
	for {
		ctx.Reset()
		err := ctx.Generate(s)
		emitted := ctx.Emits("out")
		got = append(got, emitted...)
		if err != nil || len(emitted) == 0 {
			return got, err
		}
	}
}
