package queuetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// interposed stands for a consumer in its Context: after, if set, runs once
// the consumer's Stage (fast path) or Persist (general path) returned, and
// with skipPostCommit the consumer's PostCommit is not run (the Context
// died right after the commit). Either loses a transaction in which the
// consumer already wrote its new state. beforePostCommit, if set, runs
// before the consumer's PostCommit (a slow one).
type interposed struct {
	queue.Consumer
	after            func()
	beforePostCommit func()
	skipPostCommit   bool
}

func (p *interposed) Persist() error {
	err := p.Consumer.Persist()
	p.wrote()
	return err
}

func (p *interposed) PostCommit() {
	if p.beforePostCommit != nil {
		p.beforePostCommit()
	}
	if !p.skipPostCommit {
		p.Consumer.PostCommit()
	}
}

func (p *interposed) wrote() {
	if p.after != nil {
		p.after()
	}
}

// interposedStager keeps the single-store fast path for a consumer that
// stages.
type interposedStager struct {
	*interposed
	s tx.Stager
}

func (p interposedStager) Store() any { return p.s.Store() }

func (p interposedStager) Stage(dst []tx.Write) ([]tx.Write, error) {
	dst, err := p.s.Stage(dst)
	p.wrote()
	return dst, err
}

// participant is p as a participant: a Stager if its consumer is one.
func (p *interposed) participant() tx.Participant {
	if s, ok := p.Consumer.(tx.Stager); ok {
		return interposedStager{p, s}
	}
	return p
}

// WithoutPostCommit stands for consumer c in a Context whose commit then
// never reaches c's PostCommit (the Context died right after the commit):
// for backend tests of what a consumer does next.
func WithoutPostCommit(c queue.Consumer) tx.Participant {
	return (&interposed{Consumer: c, skipPostCommit: true}).participant()
}

// SlowPostCommit stands for consumer c in a Context whose commit reaches
// c's PostCommit only once before returned (a PostCommit delayed by a GC
// pause, a stalled goroutine): for backend tests of what others do
// meanwhile and of what the late PostCommit then does. It keeps the
// single-store fast path if c stages.
func SlowPostCommit(c queue.Consumer, before func()) tx.Participant {
	return (&interposed{Consumer: c, beforePostCommit: before}).participant()
}

// lostAfterWrite is a consumer transaction lost after its consumer wrote
// its state: its Finish runs on a goroutine that stops once the consumer's
// Stage or Persist returned.
type lostAfterWrite struct {
	ctx              *tx.Context
	tx               *tx.Tx
	reached, release chan struct{}
	done             chan error
}

// startLostAfterWrite starts a transaction over consumer c that lose loses.
func startLostAfterWrite(e *Env, c queue.Consumer) (*lostAfterWrite, error) {
	l := &lostAfterWrite{reached: make(chan struct{}), release: make(chan struct{}), done: make(chan error, 1)}
	ip := &interposed{Consumer: c, after: func() {
		close(l.reached)
		<-l.release
	}}
	l.ctx = e.Coord.NewContext(ip.participant())
	var err error
	l.tx, err = l.ctx.Start(time.Minute)
	return l, err
}

// lose finishes the transaction on a goroutine that stops right after the
// consumer wrote its state, and then has the coordinator end the
// transaction as its sweeper ends one that timed out (invalidated: it can
// never commit).
func (l *lostAfterWrite) lose(e *Env) error {
	go func() { l.done <- l.ctx.Finish() }()
	select {
	case <-l.reached:
	case err := <-l.done:
		return fmt.Errorf("the transaction to lose ended before its consumer wrote: %v", err)
	}
	return e.Coord.Invalidate(l.tx)
}

// late lets the lost goroutine go on and returns its Finish's error.
func (l *lostAfterWrite) late() error {
	close(l.release)
	return <-l.done
}

// testLostAfterWrite: a consumer transaction lost after its consumer staged
// (fast path) or persisted (general path) its state, which the coordinator
// then ends (a timeout), no longer holds its partitions: the next taker
// gets them, exactly once, and the late end of the lost goroutine (its
// commit fails, it rolls back) leaves the taker's lease and state alone.
func testLostAfterWrite(t *testing.T, e *Env) {
	for _, s := range []queue.Strategy{queue.FIFO, queue.Hash, queue.RoundRobin} {
		t.Run(string(s), func(t *testing.T) { lostConsumer(t, e, s, lateAfterWrite) })
	}
	t.Run("hash/same_consumer_new_tx", func(t *testing.T) {
		keyedQueue(t, e, "lostw-reused", 2, queue.Group{Name: "g", Strategy: queue.Hash, Instances: 1}, 10)
		c, err := e.Queues.Consumer("lostw-reused", "g", 0)
		must(t, err)
		l, err := startLostAfterWrite(e, c)
		must(t, err)
		if held, err := c.Dequeue(10); err != nil || len(held) != 10 {
			t.Fatalf("the consumer got %d entries (%v), want 10", len(held), err)
		}
		must(t, l.lose(e))
		all := Drain(t, e, c, 4)
		if err := l.late(); !errors.Is(err, tx.ErrNotInProgress) {
			t.Fatalf("the lost transaction's late commit returned %v, want ErrNotInProgress", err)
		}
		expectExactly(t, payloads(append(all, Drain(t, e, c, 4)...)), "e", 10)
	})
}

// testPostCommitNeverRun: a consumer transaction committed, but the
// consumer's PostCommit never ran (the Context died after the commit). The
// next taker — a FIFO peer, a new consumer of the same instance, or the same
// consumer in a new transaction — gets only what the commit left, once; and
// the PostCommit, run late after the taker committed, changes nothing.
func testPostCommitNeverRun(t *testing.T, e *Env) {
	for _, s := range []queue.Strategy{queue.FIFO, queue.Hash} {
		for _, reuse := range []bool{false, true} {
			name := string(s) + map[bool]string{false: "/new_consumer", true: "/same_consumer"}[reuse]
			t.Run(name, func(t *testing.T) { postCommitNeverRun(t, e, s, reuse) })
		}
	}
}

func postCommitNeverRun(t *testing.T, e *Env, s queue.Strategy, reuse bool) {
	const n = 40
	qn := fmt.Sprintf("nopost-%s-%v", s, reuse)
	instances, takerInstance := 1, 0 // hash: the same instance's partitions
	if s == queue.FIFO {
		instances, takerInstance = 2, 1
	}
	keyedQueue(t, e, qn, 4, queue.Group{Name: "g", Strategy: s, Instances: instances}, n)
	lost, err := e.Queues.Consumer(qn, "g", 0)
	must(t, err)
	var held []queue.Entry
	must(t, Step(e.Coord, func() (err error) { held, err = lost.Dequeue(n/2 - 5); return err }, WithoutPostCommit(lost)))
	if len(held) == 0 {
		t.Fatal("the consumer whose PostCommit is lost got nothing")
	}
	taker := lost
	if !reuse {
		taker, err = e.Queues.Consumer(qn, "g", takerInstance)
		must(t, err)
	}
	// Another consumer may wait a while for the PostCommit (it might only
	// be slow) before it takes the partitions over.
	all := append(held, drainAtLeast(t, e, taker, n, n-len(held))...)
	if len(all) < n {
		t.Fatalf("the taker got %d of the %d entries the commit left: the partitions stay leased", len(all)-len(held), n-len(held))
	}
	if !reuse {
		lost.PostCommit() // its goroutine comes back
	}
	for i := range instances {
		c, err := e.Queues.Consumer(qn, "g", i)
		must(t, err)
		all = append(all, Drain(t, e, c, n)...)
	}
	expectExactly(t, payloads(all), "e", n)
}

// drainAtLeast drains c, committing each batch of up to max entries, until
// it got want entries (or 30 s passed: the bound only guards against a
// hang), and then until a dequeue comes back empty.
func drainAtLeast(t testing.TB, e *Env, c queue.Consumer, max, want int) []queue.Entry {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	all := Drain(t, e, c, max)
	for len(all) < want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		all = append(all, Drain(t, e, c, max)...)
	}
	return all
}
