package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// t_ingester is a source that accepts pushed events (runtime.Ingester) and
// never commits them: Ingest refuses an event over 1 MiB, as the HTTP
// source does, and otherwise signals ingestEntered and waits for Close,
// then fails as the HTTP source does when it closes first.
type ingesterSource struct{ closed chan struct{} }

var ingestEntered chan struct{}

func (s *ingesterSource) Generate(ctx flowlet.Context) error { return flowlet.ErrIdle }

func (s *ingesterSource) Ingest(ctx context.Context, evs [][]byte) error {
	for _, e := range evs {
		if len(e) > 1<<20 {
			return errors.New("an event exceeds the limit") // as the HTTP source's
		}
	}
	close(ingestEntered)
	<-s.closed
	return errors.New("the source closed before the events committed")
}

func (s *ingesterSource) Close() error { close(s.closed); return nil }

func init() {
	flowlet.Register("t_ingester", func() flowlet.Flowlet { return &ingesterSource{closed: make(chan struct{})} },
		flowlet.TypeInfo{Source: true, SingleInstance: true, Outputs: []string{"out"}})
}

// TestIngestTypedErrors: Ingest's errors are typed for the HTTP API (4xx
// or 503, never a 500): an event over MaxPayload for a source that accepts
// events was handed to it and came back as an untyped error (the API
// answered 500), and a source that closed because the app stopped while
// the events waited answered an untyped error too; now ErrBadRequest and
// ErrNotRunning.
func TestIngestTypedErrors(t *testing.T) {
	ingestEntered = make(chan struct{})
	dir := t.TempDir()
	a, err := runtime.Open(plan(t, dir, `
app: ing
flowlets:
  src: {type: t_ingester}
  c: {type: t_count}
connections:
  - {from: src, to: c}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer cancel()
	deadline := time.Now().Add(time.Minute) // a hang detector
	for ok, _ := a.Ready(); !ok; ok, _ = a.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("the app did not start")
		}
		time.Sleep(time.Millisecond)
	}

	big := []runtime.IngestEvent{{Payload: []byte(strings.Repeat("x", runtime.MaxPayload+1))}}
	if _, err := a.Ingest(context.Background(), "src", "", big); !errors.Is(err, runtime.ErrBadRequest) {
		t.Errorf("an event over MaxPayload to a source: %v, want ErrBadRequest", err)
	}
	if _, err := a.Ingest(context.Background(), "c", "", big); !errors.Is(err, runtime.ErrBadRequest) {
		t.Errorf("an event over MaxPayload to a queue: %v, want ErrBadRequest", err)
	}
	// An input the flowlet does not have is refused whatever the events:
	// a source has none (it took the events, 200), and no events skipped
	// the check (0 accepted, 200).
	one := []runtime.IngestEvent{{Payload: []byte("x")}}
	for _, c := range []struct {
		fl, input string
		evs       []runtime.IngestEvent
	}{{"src", "nope", one}, {"src", "nope", nil}, {"c", "nope", nil}} {
		if n, err := a.Ingest(context.Background(), c.fl, c.input, c.evs); !errors.Is(err, runtime.ErrBadRequest) || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("ingest into %s, input nope, %d events: %d, %v; want ErrBadRequest naming the input", c.fl, len(c.evs), n, err)
		}
	}

	ingested := make(chan error, 1)
	go func() {
		_, err := a.Ingest(context.Background(), "src", "", []runtime.IngestEvent{{Payload: []byte("a")}})
		ingested <- err
	}()
	<-ingestEntered
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	a.Close()
	if err := <-ingested; !errors.Is(err, runtime.ErrNotRunning) {
		t.Errorf("ingest while the app stopped: %v, want ErrNotRunning", err)
	}
}
