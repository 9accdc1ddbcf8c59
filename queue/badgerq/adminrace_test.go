package badgerq

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/flowrun/flowrun/queue"
)

// recreatedQueue is a node whose queue "q" (1 partition, group g) a test
// deletes and creates again (2 partitions, group g, one event "new") in
// the middle of an admin call, and then checks, also after a restart.
type recreatedQueue struct {
	*generalNode
}

func newRecreatedQueue(t *testing.T) recreatedQueue {
	n := newGeneralNode(t)
	must := mustT(t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 1}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	return recreatedQueue{n}
}

// recreate is the other admin's work: the queue created again under its
// name, a group added and an event committed.
func (n recreatedQueue) recreate() {
	must := mustT(n.t)
	must(n.qs.CreateQueue("q", queue.Config{Partitions: 2}))
	must(n.qs.AddGroup("q", queue.Group{Name: "g", Strategy: queue.FIFO, Instances: 1}))
	p, err := n.qs.Producer("q")
	must(err)
	ctx := n.coord.NewContext(p)
	_, err = ctx.Start(time.Minute)
	must(err)
	must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("new")}))
	must(ctx.Finish())
}

// check fails the test unless the queue created again is intact, now and
// after a restart: its config, and its event delivered to its group.
func (n recreatedQueue) check() {
	t := n.t
	must := mustT(t)
	for _, when := range []string{"now", "after a restart"} {
		if when != "now" {
			n.restart()
		}
		info, err := n.b.Info("q")
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if info.Config.Partitions != 2 || info.Events != 1 || len(info.Groups) != 1 || info.Groups[0].Name != "g" {
			t.Fatalf("%s: queue %+v, want the one created again (2 partitions, 1 event, group g)", when, info)
		}
	}
	c, err := n.qs.Consumer("q", "g", 0)
	must(err)
	ctx := n.coord.NewContext(c)
	_, err = ctx.Start(time.Minute)
	must(err)
	es, err := c.Dequeue(10)
	must(err)
	must(ctx.Finish())
	if len(es) != 1 || string(es[0].Payload) != "new" {
		t.Fatalf("after a restart the queue created again delivered %d entries, want [new]", len(es))
	}
}

// A queue created again under the name of one being deleted, as soon as
// DeleteQueue had freed the name, lost its metadata to that DeleteQueue
// (which freed the name before deleting the old metadata key, the same
// key): in memory it went on, and after a restart it was gone and its
// committed entries were dropped as orphans.
func TestDeleteQueueKeepsQueueCreatedAgain(t *testing.T) {
	n := newRecreatedQueue(t)
	nameFreedTestHook = func(string) {
		nameFreedTestHook = nil
		n.recreate()
	}
	t.Cleanup(func() { nameFreedTestHook = nil })
	mustT(t)(n.qs.DeleteQueue("q"))
	n.check()
}

// An admin call that had looked the queue up when another deleted it and
// created it again wrote the deleted queue's metadata (its id, config and
// groups, changed) over the new queue's: after a restart the new queue had
// the old one's id and config, and its entries were dropped as orphans.
// It now fails with ErrUnknownQueue, as after the delete.
func TestAdminOfDeletedQueueLeavesQueueCreatedAgain(t *testing.T) {
	calls := map[string]func(qs *queue.Queues) error{
		"add_group": func(qs *queue.Queues) error {
			return qs.AddGroup("q", queue.Group{Name: "h", Strategy: queue.Hash, Instances: 1})
		},
		"remove_group": func(qs *queue.Queues) error { return qs.RemoveGroup("q", "g") },
		"rescale":      func(qs *queue.Queues) error { return qs.Rescale("q", "g", 2) },
		"set_strategy": func(qs *queue.Queues) error { return qs.SetStrategy("q", "g", queue.Hash) },
	}
	names := make([]string, 0, len(calls))
	for name := range calls {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			n := newRecreatedQueue(t)
			lockQueueTestHook = func(string) {
				lockQueueTestHook = nil
				mustT(t)(n.qs.DeleteQueue("q"))
				n.recreate()
			}
			t.Cleanup(func() { lockQueueTestHook = nil })
			if err := calls[name](n.qs); !errors.Is(err, queue.ErrUnknownQueue) {
				t.Errorf("%s of the deleted queue: %v, want ErrUnknownQueue", name, err)
			}
			n.check()
		})
	}
}
