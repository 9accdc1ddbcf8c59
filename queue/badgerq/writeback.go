package badgerq

import (
	"time"

	"github.com/flowrun/flowrun/tx"
)

// Writeback. Without Sync nothing syncs Badger's value log or write-ahead
// file, so the kernel holds up to a whole file of dirty pages — and Badger,
// when it rotates to the next value-log file, msyncs the old one inside its
// single write goroutine (logFile.doneWriting → Truncate → msync): every
// commit of every queue waited 5–45 ms for it, several times a second at
// 150 MB/s (the p99 tail of the non-durable 1 KiB rows in specs/queues.md).
// The writeback loop fdatasyncs the DB's files every WritebackInterval
// while producers commit, off the write path, so a rotation finds little
// left to write. It makes nothing durable that callers rely on: durability
// stays the log's business (Sync / tx.BadgerLogOptions.Sync).
//
// A tick that finds nothing produced stops the ticker: the loop sleeps until
// the next producer commit wakes it (wakeWriteback), so an idle app does not
// wake every WritebackInterval for nothing.
func (b *Backend) writeback() {
	defer b.wg.Done()
	s := tx.NewBadgerSyncer(b.db)
	defer s.Close()
	t := time.NewTicker(b.opts.WritebackInterval)
	defer t.Stop()
	var seen int64
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		}
		if n := b.produced.Load(); n != seen {
			seen = n
			_ = s.Sync() // best effort; a failing disk fails the next durable write
			b.wroteBack.Add(1)
			continue
		}
		// Idle: park. The flag goes up before the second look at
		// produced, and a producer adds to produced before it looks at
		// the flag, so one of the two sees the other.
		t.Stop()
		b.writebackIdle.Store(true)
		if b.produced.Load() == seen {
			select {
			case <-b.stop:
				return
			case <-b.writebackWake:
			}
		}
		b.writebackIdle.Store(false)
		t.Reset(b.opts.WritebackInterval)
	}
}

// wakeWriteback is called after each producer commit: it wakes a parked
// writeback loop (one atomic load otherwise).
func (b *Backend) wakeWriteback() {
	if b.writebackIdle.Load() {
		select {
		case b.writebackWake <- struct{}{}:
		default:
		}
	}
}
