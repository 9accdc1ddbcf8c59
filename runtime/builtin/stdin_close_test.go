package builtin

import (
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
)

// A stdin source closed while its reader waits for read-ahead room (two
// steps' worth read, no step takes them: the app stopped): the reader
// waited for room for good, a goroutine left behind after Close.
func TestStdinSourceCloseEndsReader(t *testing.T) {
	const perStep = 3
	// The reader reads ahead as far as it may, then waits for room.
	s, _, _ := readAhead(t, 1000, perStep)
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
