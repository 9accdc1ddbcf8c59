package runtime

import (
	"context"
	"time"
)

// drain waits until every source has ended, every queue is empty and the
// tickers had a last tick, then marks the app drained.
func (a *App) drain(ctx context.Context) error {
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	waitEmpty := func() bool {
		for {
			if a.sourcesLeft.Load() == 0 && a.unsettled.Load() == 0 {
				empty, err := a.queuesEmpty()
				if err != nil {
					a.log.Warn("drain: queue info", "err", err)
				}
				if empty {
					return true
				}
			}
			select {
			case <-ctx.Done():
				return false
			case <-poll.C:
			}
		}
	}
	if !waitEmpty() {
		return nil
	}
	// A last tick for every ticker (windows close, buffers flush), then
	// whatever those ticks emitted must drain too.
	// No Scale while the last ticks run: every instance asked must answer.
	a.scaleMu.Lock()
	defer a.scaleMu.Unlock()
	a.instMu.Lock()
	insts := append([]*instance(nil), a.instances...)
	a.instMu.Unlock()
	var waits []chan struct{}
	for _, in := range insts {
		if in.ticker != nil && in.src == nil {
			done := make(chan struct{})
			in.final <- done
			waits = append(waits, done)
		}
	}
	for _, w := range waits {
		select {
		case <-w:
		case <-ctx.Done():
			return nil
		}
	}
	if len(waits) > 0 && !waitEmpty() {
		return nil
	}
	a.drained.Store(true)
	a.log.Info("drained: sources ended and every queue of the app is empty")
	return nil
}

// queuesEmpty checks the consumed queues upstream first: a queue found
// empty had every event its consumers emit committed before the check, so
// checking their output queues afterwards sees those events.
func (a *App) queuesEmpty() (bool, error) {
	var names []string
	for _, f := range a.plan.Flowlets {
		if len(f.Inputs) > 0 {
			names = append(names, ReplayName(f.Name))
		}
	}
	for _, q := range a.plan.Queues {
		names = append(names, q.Name)
	}
	for _, n := range names {
		info, err := a.st.queues.Info(n)
		if err != nil {
			return false, err
		}
		for _, g := range info.Groups {
			if g.Lag > 0 {
				return false, nil
			}
		}
	}
	return true, nil
}
