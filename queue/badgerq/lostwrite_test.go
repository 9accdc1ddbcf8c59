package badgerq

import (
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
)

// General path: a consumer transaction persisted its state and timed out
// before its commit (lost after its Persist); a FIFO peer took the
// partition over, reading the committed state from the store (the lost
// version is invisible), and committed the entries. The lost transaction's
// late Rollback restored the state before it over the peer's: after a
// restart the peer's entries came again. A slot taken over is no longer
// the late transaction's to restore.
func TestLatePersistedRollbackLeavesTakersState(t *testing.T) { lateConsumerTakenOver(t, true) }

// A transaction that started first may lease a partition after a younger
// one committed it: its state version then carries the lower pointer. Lost
// after that commit (its PostCommit never ran), its lease is taken over
// with the store's state, which its pointer alone does not show to be the
// newer one: a taker that took only a version of a higher pointer than the
// one in memory kept the state before that commit, and its entry came
// again (RandomizedLostConsumers failed about once in a hundred runs).
func TestAdoptCommitOfOlderPointer(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(map[bool]string{true: "fast", false: "general"}[fast], func(t *testing.T) {
			e := newEnv(t, fast)
			must := mustT(t)
			fifoQueue(t, e.Queues, e.Coord, 2)("a", "b")
			older, _ := e.Queues.Consumer("q", "g", 1)
			olderCtx := e.Coord.NewContext(queuetest.WithoutPostCommit(older))
			_, err := olderCtx.Start(time.Minute)
			must(err)
			young, _ := e.Queues.Consumer("q", "g", 0)
			var got []queue.Entry
			must(queuetest.Step(e.Coord, func() (err error) { got, err = young.Dequeue(1); return err }, young))
			if len(got) != 1 || string(got[0].Payload) != "a" {
				t.Fatalf("the younger transaction got %v, want a", got)
			}
			if got, err = older.Dequeue(10); err != nil || len(got) != 1 || string(got[0].Payload) != "b" {
				t.Fatalf("the older transaction got %v (%v), want b", got, err)
			}
			must(olderCtx.Finish())
			// Used again, the consumer takes its lost transaction's place
			// at once (another taker waits PostCommitWait first).
			must(queuetest.Step(e.Coord, func() (err error) { got, err = older.Dequeue(10); return err }, older))
			if len(got) != 0 {
				t.Fatalf("the taker got %d entries the older transaction committed", len(got))
			}
		})
	}
}
