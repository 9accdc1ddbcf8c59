package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// runCloseReadApp runs a small app until its one event is counted and
// stops it: its store still open, as when flowrun run's HTTP server shut
// down with requests in flight.
func runCloseReadApp(t *testing.T) *App {
	t.Helper()
	a := openYAML(t, viewGCAppYAML, Options{NoSync: true})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	waitCount(t, a, 1)
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	return a
}

// closeUnderRead starts a.Close while a read is held and returns once
// Close waits for it (closing, with a read in), failing if Close returns
// first (it did not wait). The channel gives Close's result.
func closeUnderRead(t *testing.T, a *App) <-chan error {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	pollUntil(t, "Close to wait for the read", func() bool {
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while a read was in progress", err)
		default:
		}
		a.st.useMu.Lock()
		defer a.st.useMu.Unlock()
		return a.st.closing && a.st.inUse > 0
	})
	return closed
}

// wantClosed waits for the result of Close after the read ended.
func wantClosed(t *testing.T, closed <-chan error) {
	t.Helper()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not return after the read ended")
	}
}

// TestCloseWaitsForReads: a read of the app's store in progress (the HTTP
// API's, which can outlast the server's two-second shutdown) holds up
// Close until it ends, and a read begun after Close began fails with
// ErrStoreClosed. Close went on and closed Badger under the read, whose
// next access then ran into unmapped tables and killed the process.
func TestCloseWaitsForReads(t *testing.T) {
	a := runCloseReadApp(t)
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
	closed := closeUnderRead(t, a)
	if err := a.View("c", func(StateReader) error { return nil }); !errors.Is(err, ErrStoreClosed) {
		t.Errorf("a read begun after Close: %v, want ErrStoreClosed", err)
	}
	close(release)
	if err := <-read; err != nil {
		t.Fatalf("the read in progress at Close: %v", err)
	}
	wantClosed(t, closed)
}

// TestCloseWaitsForAppQueueReads: the app's own queue reads that the HTTP
// API makes (Status, which lists every queue's keys; Scale's bound, which
// reads its inputs' infos) are inspection reads too: Close waits for one
// in progress, and one begun after reads nothing. Both read Badger without
// enter, so Close went on under them (Close returned while a read was in
// progress).
func TestCloseWaitsForAppQueueReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		read func(a *App) error // what the read in progress found
	}{
		{"status", func(a *App) error {
			if st := a.Status(); len(st.Queues) == 0 {
				return errors.New("Status in progress at Close listed no queue")
			}
			return nil
		}},
		{"scale", func(a *App) error {
			if _, err := a.Scale(context.Background(), "c", 1); !errors.Is(err, ErrNotRunning) {
				return fmt.Errorf("Scale after Run: %v, want ErrNotRunning", err)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := runCloseReadApp(t)
			reading, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			defer free() // a failure below leaves no read held
			queueReadHook = func() {
				queueReadHook = nil // the read in progress only
				close(reading)
				<-release
			}
			t.Cleanup(func() { queueReadHook = nil })
			read := make(chan error, 1)
			go func() { read <- tc.read(a) }()
			<-reading
			closed := closeUnderRead(t, a)
			if st := a.Status(); len(st.Queues) != 0 {
				t.Errorf("a Status begun after Close listed %d queues, want none", len(st.Queues))
			}
			free()
			if err := <-read; err != nil {
				t.Fatal(err)
			}
			wantClosed(t, closed)
		})
	}
}
