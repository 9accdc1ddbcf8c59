package runtime

import (
	"context"
	"sync"
)

// ctxMutex is a mutex whose lock can give up when a context ends (Scale
// behind a scale-down that completes in the background, which can hold it
// up to --step-timeout). The zero value is unlocked.
type ctxMutex struct {
	once sync.Once
	ch   chan struct{} // one element while locked
}

func (m *ctxMutex) c() chan struct{} {
	m.once.Do(func() { m.ch = make(chan struct{}, 1) })
	return m.ch
}

func (m *ctxMutex) Lock() { m.c() <- struct{}{} }

// LockContext locks m, or returns ctx's error if ctx ends first. A free
// mutex is taken even if ctx has ended.
func (m *ctxMutex) LockContext(ctx context.Context) error {
	select {
	case m.c() <- struct{}{}:
		return nil
	default:
	}
	select {
	case m.c() <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *ctxMutex) Unlock() {
	select {
	case <-m.c():
	default:
		panic("runtime: unlock of an unlocked ctxMutex")
	}
}
