package runtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCloseWaitsForReads: a read of the app's store in progress (the HTTP
// API's, which can outlast the server's two-second shutdown) holds up
// Close until it ends, and a read begun after Close began fails with
// ErrStoreClosed. Close went on and closed Badger under the read, whose
// next access then ran into unmapped tables and killed the process.
func TestCloseWaitsForReads(t *testing.T) {
	a := openYAML(t, `
app: closeread
flowlets:
  gen: {type: generator, config: {count: 1}}
  c: {type: t_viewgc}
connections:
  - {from: gen, to: c}
`, Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	waitCount(t, a, 1)

	reading, release := make(chan struct{}), make(chan struct{})
	read := make(chan error, 1)
	go func() {
		read <- a.View("c", func(r StateReader) error {
			close(reading)
			<-release
			return wantCountAtStart(t, r) // after Close began
		})
	}()
	<-reading
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	closing := func() bool {
		a.st.useMu.Lock()
		defer a.st.useMu.Unlock()
		return a.st.closing
	}
	pollUntil(t, "Close to begin", func() bool {
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a read was in progress", err)
		default:
		}
		return closing()
	})
	if err := a.View("c", func(StateReader) error { return nil }); !errors.Is(err, ErrStoreClosed) {
		t.Errorf("a read begun after Close: %v, want ErrStoreClosed", err)
	}
	close(release)
	if err := <-read; err != nil {
		t.Fatalf("the read in progress at Close: %v", err)
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return after the read ended")
	}
}
