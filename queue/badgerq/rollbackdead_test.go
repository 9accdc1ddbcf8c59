package badgerq

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/queuetest"
	"github.com/flowrun/flowrun/tx"
)

// failPersist is a participant whose Persist runs act and fails: the
// Context then rolls back every participant that persisted before it.
type failPersist struct{ act func() }

var errFailPersist = errors.New("persist refused")

func (f *failPersist) StartTx(*tx.Tx) error  { return nil }
func (f *failPersist) UpdateTx(*tx.Tx) error { return nil }
func (f *failPersist) ChangeKeys() [][]byte  { return nil }
func (f *failPersist) PostCommit()           {}
func (f *failPersist) Rollback() error       { return nil }
func (f *failPersist) Persist() error        { f.act(); return errFailPersist }

// General path: a consumer that persisted its new cursor states and is
// then rolled back restores the previous ones. When its group was removed
// (or its queue deleted) in between, the restore wrote cursor states under
// the dead ids after the sweep, and they stayed until the next Open. A
// rollback that lands there now sweeps them, as a late commit does.
func TestRollbackAfterRemoveLeavesNoKeys(t *testing.T) {
	for _, mode := range []string{"remove group", "delete queue"} {
		t.Run(mode, func(t *testing.T) {
			n := newGeneralNode(t)
			must := mustT(t)
			must(n.qs.CreateQueue("q", queue.Config{Partitions: 2}))
			must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
			q, _ := n.b.queue("q")
			gid := q.meta.Groups[0].ID
			p, _ := n.qs.Producer("q")
			must(queuetest.Step(n.coord, func() error {
				return p.Enqueue(context.Background(), queue.Event{Payload: []byte("a")})
			}, p))
			c, _ := n.qs.Consumer("q", "g", 0)
			// A committed state first, so the rollback has one to restore.
			must(queuetest.Step(n.coord, func() error {
				_, err := c.Dequeue(10)
				return err
			}, c))
			must(queuetest.Step(n.coord, func() error {
				return p.Enqueue(context.Background(), queue.Event{Payload: []byte("b")})
			}, p))
			f := &failPersist{act: func() {
				if mode == "remove group" {
					must(n.qs.RemoveGroup("q", "g"))
				} else {
					must(n.qs.DeleteQueue("q"))
				}
			}}
			ctx := n.coord.NewContext(c, f)
			_, err := ctx.Start(time.Minute)
			must(err)
			if got, err := c.Dequeue(10); err != nil || len(got) != 1 {
				t.Fatalf("dequeue: %d, %v", len(got), err)
			}
			if err := ctx.Finish(); !errors.Is(err, errFailPersist) {
				t.Fatalf("Finish: %v, want the refused persist", err)
			}
			states := 0
			pfx := stateGroupPrefix(q.id, gid)
			if mode == "delete queue" {
				pfx = stateQueuePrefix(q.id)
			}
			_ = n.db.View(func(txn *badger.Txn) error {
				it := txn.NewIterator(badger.IteratorOptions{Prefix: pfx})
				defer it.Close()
				for it.Rewind(); it.Valid(); it.Next() {
					states++
				}
				return nil
			})
			if states != 0 {
				t.Fatalf("%d cursor states of the removed group remain after its consumer's rollback", states)
			}
		})
	}
}
