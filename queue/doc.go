// Package queue is the durable, transactional queue between flowlets.
//
// A flowlet step dequeues its inputs, writes state and emits outputs in one
// transaction of package tx. Queues take part in that transaction: an
// enqueued event becomes visible to consumers only when the producing
// transaction commits, and a dequeued event counts as consumed only when the
// consuming transaction commits. An aborted consumer gets the same events
// again; an aborted producer leaves nothing behind.
//
// # Two APIs, as database/sql and database/sql/driver
//
// The runtime talks to Queues (this package): it validates names, sizes and
// group members once, for every backend. A storage engine implements Backend
// (the driver side); badgerq is the embedded default, and queuetest is the
// conformance suite every backend must pass.
//
//	b, _ := badgerq.Open(db, badgerq.Options{})
//	qs := queue.New(b)
//	qs.CreateQueue("parser.out", queue.Config{Partitions: 64})
//	qs.AddGroup("parser.out", queue.Group{Name: "counter", Strategy: queue.Hash, Instances: 2})
//
//	p, _ := qs.Producer("parser.out")     // a tx.Participant
//	c, _ := qs.Consumer("parser.out", "counter", 0)
//	ctx := coord.NewContext(p, c)
//	ctx.Start(time.Second)
//	in, _ := c.Dequeue(100)               // inside the transaction
//	p.Enqueue(context.Background(), queue.Event{Payload: out, Key: k})
//	ctx.Finish()                          // ack and emits commit together
//
// # Groups and partitions
//
// Every group receives every event. A queue has a fixed number of virtual
// partitions chosen at creation; an event with a key goes to partition
// hash(key), a keyless one to a partition the producer rotates through. Inside
// a group the strategy says who reads a partition: Hash and RoundRobin give
// partition p to instance p % instances, so a key's events reach one instance
// in order; FIFO lets any idle instance take the next free partition. A
// partition is read by at most one transaction at a time, so rescaling a group
// is only a new instance count: a partition moves to its new owner once the
// old owner's in-flight transaction has finished, and its cursor is stored per
// partition, not per instance. No barrier, no pause.
//
// specs/queues.md has the key layout, the exact semantics and measured figures.
package queue
