package runtime

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

// closeCounting counts its Init and Close calls (t_init_close).
type closeCounting struct{}

var initCloseInits, initCloseCloses atomic.Int32

func (closeCounting) Init(flowlet.InitContext) error { initCloseInits.Add(1); return nil }
func (closeCounting) Close() error                   { initCloseCloses.Add(1); return nil }
func (closeCounting) Process(flowlet.Context, flowlet.Event) error {
	return nil
}

func init() {
	flowlet.Register("t_init_close", func() flowlet.Flowlet { return closeCounting{} }, flowlet.TypeInfo{Sink: true})
}

// TestNewInstanceFailureClosesFlowlet: when building an instance fails after
// its flowlet's Init succeeded, the flowlet is closed (an http_source's
// listener, a file_sink's lock are released), not left open.
func TestNewInstanceFailureClosesFlowlet(t *testing.T) {
	initCloseInits.Store(0)
	initCloseCloses.Store(0)
	fault := errors.New("injected")
	afterInit = func(in *instance) error {
		if in.fl.Name == "sink" {
			return fault
		}
		return nil
	}
	defer func() { afterInit = nil }()
	p, dir := planYAML(t, `
app: initclose
flowlets:
  gen: {type: generator, config: {count: 1}}
  sink: {type: t_init_close}
connections:
  - {from: gen, to: sink}
`)
	a, err := Open(p, Options{DataDir: filepath.Join(dir, "data"), NoSync: true})
	if err == nil {
		a.Close()
		t.Fatal("Open succeeded with an injected failure")
	}
	if !errors.Is(err, fault) {
		t.Fatalf("Open: %v, want the injected failure", err)
	}
	if i, c := initCloseInits.Load(), initCloseCloses.Load(); i != 1 || c != 1 {
		t.Errorf("Init ran %d times, Close %d times: want the initialized flowlet closed", i, c)
	}
}
