package runtime

import (
	"context"
	"testing"
	"time"
)

// TestStdinSourceSilentStops: an app whose standard input never sends nor
// ends stops when asked, and closes: its stdin_source's reader, blocked
// in a read that cannot be interrupted, holds up neither (it ends with the
// process, or when the input does).
func TestStdinSourceSilentStops(t *testing.T) {
	defer openStdinPipe(t).Close()
	for _, drain := range []bool{false, true} {
		a := openYAML(t, `
app: silentstdin
flowlets:
  src: {type: stdin_source}
  sink: {type: t_take}
connections:
  - {from: src, to: sink}
`, Options{NoSync: true, Drain: drain})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		for ok, _ := a.Ready(); !ok; ok, _ = a.Ready() {
			time.Sleep(time.Millisecond)
		}
		cancel()
		closed := make(chan error, 1)
		go func() {
			if err := <-done; err != nil {
				closed <- err
				return
			}
			closed <- a.Close()
		}()
		select { // a hang detector, not a timing assertion
		case err := <-closed:
			if err != nil {
				t.Errorf("drain=%v: %v", drain, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("drain=%v: Run or Close still waits a minute after the stop", drain)
		}
	}
}
