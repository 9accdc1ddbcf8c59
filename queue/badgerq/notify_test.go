package badgerq

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestNotifyGen: the generation moves at every notify; ReadyAt of an old
// generation is closed, of the current one open until the next notify; a
// notify with nobody waiting allocates nothing (the producers' and busy
// consumers' path takes no channel).
func TestNotifyGen(t *testing.T) {
	q := &queueRT{}
	g := q.gen.Load()
	ch := q.readyAt(g)
	select {
	case <-ch:
		t.Fatal("ReadyAt(current generation) is closed before any notify")
	default:
	}
	q.notify()
	if q.gen.Load() == g {
		t.Fatal("notify did not move the generation")
	}
	select {
	case <-ch:
	default:
		t.Fatal("notify did not close the channel")
	}
	select {
	case <-q.readyAt(g):
	default:
		t.Fatal("ReadyAt(an old generation) is open: that wake-up would be lost")
	}
	if q.waiting.Load() {
		// readyAt(g) made a channel nobody waits on now; the next notify
		// closes it.
		q.notify()
	}
	if n := testing.AllocsPerRun(1000, func() { _ = q.gen.Load(); q.notify() }); n != 0 {
		t.Errorf("Gen + notify without waiters: %v allocations, want 0", n)
	}
}

// TestNotifyNoLostWakeup: a consumer that takes the generation, looks at
// the data, and waits on ReadyAt(generation) when it found nothing new sees
// every update of concurrent producers (a lost wake-up hangs the test).
func TestNotifyNoLostWakeup(t *testing.T) {
	q := &queueRT{}
	const producers, each = 4, 5000
	var data atomic.Int64
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				data.Add(1) // "commit"
				q.notify()
			}
		}()
	}
	seen, waits := int64(0), 0
	for seen < producers*each {
		g := q.gen.Load() // before the "transaction"
		if n := data.Load(); n > seen {
			seen = n
			continue
		}
		waits++
		<-q.readyAt(g)
	}
	wg.Wait()
	t.Logf("%d waits", waits)
}
