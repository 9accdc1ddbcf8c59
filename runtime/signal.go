package runtime

import "sync"

// signal is a broadcast: wait returns a channel that is closed by the next
// notify. Take the channel before looking for work, wait on it only if there
// was none: a notify in between has closed it already, so no wakeup is lost.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}
