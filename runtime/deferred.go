package runtime

import "fmt"

// Deferred durability, with Options.DeferCommits. On the single-store fast
// path a step's commit is written and visible to every later step before the
// store's sync (tx.Context.FinishDeferred); the instance goes on to its next
// step while the sync runs, and later commits share it. Up to maxDeferred of
// an instance's commits may be visible but not yet durable; the instance
// waits for them (tx.Pending.Wait) before it idles, returns, or blocks
// (paused, throttled, backing off). Instances whose commits have an effect
// outside the store (a StepObserver: the HTTP and stdin sources, the stdout
// sink; a Publisher: the file sink) always commit with Finish.
//
// A killed process loses nothing written. A power loss can undo the app's
// last steps (a suffix: never one that a surviving step read), which the
// HTTP reads may have shown; specs/guarantees.md. That is why it is opt-in.
const maxDeferred = 8

// canDefer reports whether the instance's steps may commit deferred: the
// app asks for it (Options.DeferCommits) and no effect outside the store
// follows its commits. (Off the fast path
// FinishDeferred is Finish.)
func (in *instance) canDefer() bool {
	return in.a.opts.DeferCommits && in.obs == nil && in.pub == nil
}

// commit commits the step's transaction: deferred when it may, else durable.
func (in *instance) commit() error {
	if !in.canDefer() {
		return in.txc.Finish()
	}
	p, err := in.txc.FinishDeferred()
	if err != nil {
		return err
	}
	in.pending = append(in.pending, p)
	return nil
}

// bound waits for the oldest deferred commits until at most maxDeferred are
// left: the pipeline runs ahead of the disk by a bounded amount.
func (in *instance) bound() error {
	if len(in.pending) <= maxDeferred {
		return nil
	}
	n := len(in.pending) - maxDeferred
	err := in.pending[n-1].Wait() // covers the ones before it: the log is ordered
	in.pending = append(in.pending[:0], in.pending[n:]...)
	if err != nil {
		return fmt.Errorf("flowlet %q instance %d: %w", in.fl.Name, in.idx, err)
	}
	return nil
}

// settle waits until every commit of the instance is durable.
func (in *instance) settle() error {
	if len(in.pending) == 0 {
		return nil
	}
	err := in.pending[len(in.pending)-1].Wait()
	clear(in.pending)
	in.pending = in.pending[:0]
	if err != nil {
		return fmt.Errorf("flowlet %q instance %d: %w", in.fl.Name, in.idx, err)
	}
	return nil
}

// settleBeforeWait settles before the instance blocks for a while (paused,
// throttled by back-pressure, backing off before a retry): its commits must
// not wait for its next step to become durable. An error here means the
// coordinator has stopped (tx.ErrLogFailed): the app stops with it. Left to
// the instance's next transaction, it was lost when the app stopped first
// (paused, say): Run returned nil though the commits may not be on disk.
func (in *instance) settleBeforeWait() {
	if err := in.settle(); err != nil {
		in.logger.Error("sync of deferred commits failed", "err", err)
		in.a.stopOn(err)
	}
}
