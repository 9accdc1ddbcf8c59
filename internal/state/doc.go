// Package state is the Badger implementation of flowlet state: the
// transactional key-value tables and conflict-free counters that
// flowlet.Context hands to a flowlet. The runtime opens one Store per flowlet
// instance and adds it to the instance's tx.Context as a participant; the
// tables and counters a flowlet asks for are views onto that one participant,
// so a flowlet may open a table in the middle of a step.
//
// A Store is a tx.Stager: when the coordinator's log is a tx.BadgerLog on the
// same *badger.DB, the step's writes and its commit record land in one atomic
// Badger write. It also implements the plain Persist/Rollback path.
//
// Every value is versioned by the write pointer of the transaction that wrote
// it, and reads filter versions with tx.Tx.Visible, so a step sees exactly
// its snapshot plus its own (buffered) writes. Old versions are removed by GC.
package state
