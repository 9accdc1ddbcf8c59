// Package badgerq is the embedded Badger implementation of queue.Backend.
//
// All queues live in the runtime's one Badger DB, next to the transaction
// log, so a flowlet step (dequeue, state writes, emits, commit record) lands
// in one atomic Badger write: the tx package's single-store fast path.
// Nothing uncommitted ever reaches the DB on that path. The general path
// (Persist/Rollback) works too, for contexts that mix stores.
//
// keys.go documents the key layout, consumer.go the cursor rules.
package badgerq
