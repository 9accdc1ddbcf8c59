package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// holdIngest is a source whose ingests wait until the runtime refuses them
// (RefuseIngest), as an http_source's wait for a step when the app stops.
type holdIngest struct {
	entered chan struct{}
	once    sync.Once
	refused chan struct{}
	err     error
}

var theHoldIngest struct {
	mu sync.Mutex
	s  *holdIngest
}

func init() {
	flowlet.Register("t_hold_ingest", func() flowlet.Flowlet {
		s := &holdIngest{entered: make(chan struct{}, 1), refused: make(chan struct{})}
		theHoldIngest.mu.Lock()
		theHoldIngest.s = s
		theHoldIngest.mu.Unlock()
		return s
	}, flowlet.TypeInfo{Source: true, SingleInstance: true, Outputs: []string{"out"}})
}

func (s *holdIngest) Generate(flowlet.Context) error { return flowlet.ErrIdle }

func (s *holdIngest) Ingest(ctx context.Context, _ [][]byte) error {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	select {
	case <-s.refused:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *holdIngest) RefuseIngest(err error) {
	if err != nil {
		s.once.Do(func() { s.err = err; close(s.refused) })
	}
}

// An App.Ingest waiting in a source when the app begins to stop is refused
// with the runtime's "flowrun is stopping" error, which is already an
// ErrNotRunning: Ingest wrapped it once more ("app is not running: app is
// not running: flowrun is stopping; …").
func TestIngestRefusedAtStopSaysNotRunningOnce(t *testing.T) {
	dir := t.TempDir()
	a, err := runtime.Open(plan(t, dir, `
app: t
flowlets:
  in: {type: t_hold_ingest}
  c: {type: t_count}
connections:
  - {from: in, to: c}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	theHoldIngest.mu.Lock()
	src := theHoldIngest.s
	theHoldIngest.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	evs := []runtime.IngestEvent{{Payload: []byte("x")}}
	for {
		res := make(chan error, 1)
		go func() { _, err := a.Ingest(context.Background(), "in", "", evs); res <- err }()
		select {
		case err := <-res: // refused before Run began: try again
			if !errors.Is(err, runtime.ErrNotRunning) {
				t.Fatalf("Ingest before Run began: %v", err)
			}
			continue
		case <-src.entered:
		}
		cancel() // the stop begins with the ingest waiting in the source
		err := <-res
		if !errors.Is(err, runtime.ErrNotRunning) {
			t.Fatalf("Ingest refused at the stop: %v, want ErrNotRunning", err)
		}
		msg := err.Error()
		if n := strings.Count(msg, runtime.ErrNotRunning.Error()); n != 1 || !strings.Contains(msg, "flowrun is stopping") {
			t.Errorf("Ingest refused at the stop: %q: want %q once, and why", msg, runtime.ErrNotRunning.Error())
		}
		break
	}
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
