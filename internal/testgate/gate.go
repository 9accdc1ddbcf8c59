package testgate

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Gate is open until Hold; the zero Gate is ready.
type Gate struct {
	mu      sync.Mutex
	release chan struct{}
	entered chan struct{}
	waiting atomic.Int32
}

// Hold makes every call to Pass wait until open. entered receives once a
// call waits. The gate is opened (and reset) when the test ends at the
// latest, so that no call stays held.
func (g *Gate) Hold(t testing.TB) (entered <-chan struct{}, open func()) {
	release, ent := make(chan struct{}), make(chan struct{}, 1)
	g.mu.Lock()
	g.release, g.entered = release, ent
	g.mu.Unlock()
	var once sync.Once
	open = func() {
		once.Do(func() {
			g.mu.Lock()
			if g.release == release {
				g.release, g.entered = nil, nil
			}
			g.mu.Unlock()
			close(release)
		})
	}
	t.Cleanup(open)
	return ent, open
}

// Pass returns at once unless the gate is held; then it tells the test it
// is there and waits for open.
func (g *Gate) Pass() {
	g.mu.Lock()
	r, e := g.release, g.entered
	g.mu.Unlock()
	if r == nil {
		return
	}
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case e <- struct{}{}:
	default:
	}
	<-r
}

// Waiting is how many calls wait in Pass now (several instances of a
// flowlet held at once).
func (g *Gate) Waiting() int { return int(g.waiting.Load()) }
