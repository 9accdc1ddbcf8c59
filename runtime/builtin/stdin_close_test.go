package builtin

import (
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
)

// A stdin source closed while its reader waits for read-ahead room (two
// steps' worth read, no step takes them: the app stopped): the reader
// waited for room for good, a goroutine left behind after Close.
func TestStdinSourceCloseEndsReader(t *testing.T) {
	const perStep = 3
	s := &StdinSource{in: &lineReader{n: 1000}}
	ctx := flowlettest.New("stdin")
	if err := ctx.Init(s, map[string]any{"lines_per_step": perStep}); err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pending)
	}
	// The reader reads ahead as far as it may, then waits for room.
	for pending() < 2*perStep {
		<-s.Ready()
	}
	select {
	case <-s.done:
		t.Fatal("the reader ended before Close with input left")
	default:
	}
	c, ok := flowlet.Flowlet(s).(flowlet.Closer)
	if !ok {
		t.Fatal("StdinSource has no Close: its reader, waiting for room, is never released")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Not a timing assertion: a bound on a wait that must end at once.
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		t.Fatal("the reader still waits for read-ahead room a minute after Close")
	}
	if err := c.Close(); err != nil { // a second Close is harmless
		t.Fatal(err)
	}
}
