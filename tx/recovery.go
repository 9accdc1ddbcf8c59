package tx

import (
	"slices"
)

// stateLocked captures what a snapshot must hold.
func (c *Coordinator) stateLocked() *State {
	s := &State{
		NextPointer: max(c.nextPointer, c.reserved),
		ReadPointer: c.readPointer,
		Invalid:     slices.Clone(c.invalid.ids),
	}
	ids := make([]uint64, 0, len(c.inProgress))
	for id := range c.inProgress {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		st := c.inProgress[id]
		if st.kind == Short && !st.logged {
			// Before its CanCommit: the log does not know it and its abort
			// writes nothing, so listed it would come back in progress
			// after a restart and hold on until its timeout. (A long one's
			// START is written at its start, logged or not.)
			continue
		}
		s.InProgress = append(s.InProgress, InProgressTx{
			ID: st.id, Kind: st.kind, Expires: st.expires,
			Pointers: slices.Clone(st.pointers), Committing: st.committing, Keys: st.keys,
			// Kept: a refused committer's keys may be gone (another holds
			// them), and its Commit must not go through after a restart.
			Refused: st.committing && st.refused,
		})
	}
	return s
}

// restore rebuilds the state from a snapshot and the edits logged after it.
//
// Transactions in progress at the crash stay in progress with their original
// expiry, so a client that survived the crash (a remote participant) can still
// finish them; the sweeper invalidates the rest when they expire. A short
// transaction is in the log only from CanCommit (or a checkpoint) on: one
// that had not got there had persisted nothing, is forgotten (a snapshot
// leaves it out too), and its client's next call gets ErrNotInProgress.
// Those that
// had passed CanCommit hold their keys again. For the others, what committed
// after they started is not kept (snapshots and COMMITTED edits carry no
// keys, which keeps both small), so any change key they try to commit
// conflicts: at worst a spurious conflict, never a lost update.
//
// It reports whether it refused a committing transaction a key (see below):
// Open then snapshots, which keeps the refusal (InProgressTx.Refused).
func (c *Coordinator) restore(s *State, edits []Edit) (refused bool) {
	if s != nil {
		c.nextPointer = max(c.nextPointer, s.NextPointer)
		c.reserved = s.NextPointer
		c.readPointer = s.ReadPointer
		c.invalid = &invalidList{ids: slices.Clone(s.Invalid)}
		for _, t := range s.InProgress {
			// logged: the snapshot (or a later one) is the record from now on.
			c.inProgress[t.ID] = &txState{
				id: t.ID, kind: t.Kind, expires: t.Expires, logged: true,
				pointers: slices.Clone(t.Pointers), committing: t.Committing, keys: t.Keys,
				refused: t.Refused,
			}
		}
	}
	endedFirst := endedBeforeStart(edits)
	for _, e := range edits {
		if endedFirst[e.TxID] && (e.Kind == EditStart || e.Kind == EditCheckpoint || e.Kind == EditCommitting) {
			// Ended before its START landed: only its pointers count.
			c.bumpPointer(e.TxID)
			c.bumpPointer(e.Pointer)
			continue
		}
		c.replay(e)
	}
	// Every pointer below the reservation may have been handed out.
	c.nextPointer = max(c.nextPointer, c.reserved)
	c.reserved = c.nextPointer // the next start reserves a fresh block
	c.ordered = c.ordered[:0]
	ids := make([]uint64, 0, len(c.inProgress))
	for id := range c.inProgress {
		ids = append(ids, id)
	}
	slices.Sort(ids) // the oldest committer of a shared key holds it, at every recovery
	for _, id := range ids {
		st := c.inProgress[id]
		c.ordered = append(c.ordered, st.allPointers()...)
		st.recovered = true
		if st.committing {
			keys := st.keys
			st.keys = nil
			// Recovered committing transactions hold their keys again. Two
			// may name the same key (the first's ABORTED or INVALID is a
			// hint, which a BadgerLog can land after the second's
			// COMMITTING or lose): the one that cannot hold it is refused
			// at Commit, as after a conflict, until a CanCommit passes.
			if _, ok := c.conflicts.checkAndHold(st.id, 0, keys); ok {
				st.keys = keys
			} else {
				st.refused, refused = true, true
			}
		}
	}
	slices.Sort(c.ordered)
	c.dirty = true
	// Started counts them: they end here (committed, aborted, invalidated),
	// and the counters must add up (Stats).
	c.stats.started = uint64(len(c.inProgress))
	return refused
}

// endedBeforeStart returns the transactions whose COMMITTED, ABORTED or
// INVALID comes in edits before their START. CanCommit writes a short
// transaction's START (with its COMMITTING) without c.mu, so an Abort or a
// timeout racing that write can log the end first; replayed in order, the
// START would bring the transaction back in progress, holding its change keys
// and the prune bound until its timeout ran out again. Transaction ids are
// never reused, so an end before the START is the end.
func endedBeforeStart(edits []Edit) map[uint64]bool {
	var startAt map[uint64]int
	for i, e := range edits {
		if e.Kind == EditStart {
			if startAt == nil {
				startAt = make(map[uint64]int)
			}
			startAt[e.TxID] = i
		}
	}
	var ended map[uint64]bool
	for i, e := range edits {
		switch e.Kind {
		case EditCommitted, EditAborted, EditInvalid:
			if at, ok := startAt[e.TxID]; ok && at > i {
				if ended == nil {
					ended = make(map[uint64]bool)
				}
				ended[e.TxID] = true
			}
		}
	}
	return ended
}

// bumpPointer keeps the next pointer above p, which a replayed edit shows
// was handed out.
func (c *Coordinator) bumpPointer(p uint64) { c.nextPointer = max(c.nextPointer, p+1) }

func (c *Coordinator) replay(e Edit) {
	bump := c.bumpPointer
	if len(e.Pointers) == 0 && (e.Kind == EditCommitted || e.Kind == EditAborted || e.Kind == EditInvalid) {
		e.Pointers = []uint64{e.TxID}
	}
	switch e.Kind {
	case EditReserve:
		c.reserved = max(c.reserved, e.Pointer)
	case EditStart:
		bump(e.TxID)
		// A START comes before any other edit recovery keeps of its
		// transaction (COMMITTING, CHECKPOINT); a COMMITTED, ABORTED or
		// INVALID may come without one (a short transaction the log never
		// heard of), and then only moves the pointers.
		if _, known := c.inProgress[e.TxID]; !known { // (a snapshot may have it already)
			c.inProgress[e.TxID] = &txState{id: e.TxID, kind: e.TxKind, expires: e.Expires, logged: true}
		}
	case EditCheckpoint:
		bump(e.Pointer)
		if st, ok := c.inProgress[e.TxID]; ok {
			st.pointers = append(st.pointers, e.Pointer)
		}
	case EditCommitting:
		if st, ok := c.inProgress[e.TxID]; ok {
			st.committing, st.refused = true, false // a CanCommit passed
			st.keys = e.Keys
		}
	case EditCommitted:
		delete(c.inProgress, e.TxID)
		for _, p := range e.Pointers {
			bump(p)
			c.readPointer = max(c.readPointer, p)
		}
	case EditAborted:
		delete(c.inProgress, e.TxID)
		for _, p := range e.Pointers {
			bump(p)
			c.readPointer = max(c.readPointer, p)
		}
	case EditInvalid:
		delete(c.inProgress, e.TxID)
		for _, p := range e.Pointers {
			bump(p)
			c.readPointer = max(c.readPointer, p)
		}
		c.invalid = c.invalid.with(e.Pointers)
	case EditPrune:
		c.invalid = c.invalid.without(e.Pointer)
	}
}

// noteLogged counts logged batches and starts a snapshot in the background
// when enough have accumulated since the last one. locked tells whether the
// caller holds c.mu.
func (c *Coordinator) noteLogged(locked bool) {
	if c.sinceSnap.Add(1) < int64(c.opts.SnapshotEvery) || !c.snapshotting.CompareAndSwap(false, true) {
		return
	}
	if !locked {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	if c.closed {
		c.snapshotting.Store(false)
		return
	}
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		c.Snapshot()
	}()
}

// Snapshot writes the coordinator's state to its log and lets the log drop the
// edits it covers. It runs by itself every Options.SnapshotEvery batches.
func (c *Coordinator) Snapshot() error {
	if c.log == nil {
		return nil
	}
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	if c.watcher != nil {
		// A gathering leader holds the gate shared; the siblings it waits
		// for would queue behind this Lock.
		c.watcher.pauseGathering(true)
		defer c.watcher.pauseGathering(false)
	}
	write, err := c.captureSnapshot()
	if err == nil {
		err = write()
	}
	c.snapshotting.Store(false)
	return err
}

// captureSnapshot hands the state to the log. The locks are released by
// defer: a panic in the log must leave neither held.
func (c *Coordinator) captureSnapshot() (write func() error, err error) {
	c.gate.Lock() // no commit between its log write and its finalization
	defer c.gate.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkOpenLocked(); err != nil {
		return nil, err
	}
	write, err = c.log.Snapshot(c.stateLocked())
	c.sinceSnap.Store(0)
	return write, err
}
