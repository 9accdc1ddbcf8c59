package badgerq

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/tx"
)

// failingLog is a BadgerLog whose appends fail once armed: after the batch
// was written (a sync that failed: the commit is in the store) or instead
// of writing it. Either way the coordinator answers tx.ErrLogFailed, and
// the commit's outcome is unknown to the caller.
type failingLog struct {
	*tx.BadgerLog
	mode atomic.Int32
}

const (
	logWorks = iota
	logFailsAfterWrite
	logFailsBeforeWrite
)

var errInjectedLog = errors.New("injected log failure")

func (l *failingLog) Append(b *tx.Batch) error {
	switch l.mode.Load() {
	case logFailsBeforeWrite:
		return errInjectedLog
	case logFailsAfterWrite:
		if err := l.BadgerLog.Append(b); err != nil {
			return err
		}
		return errInjectedLog
	}
	return l.BadgerLog.Append(b)
}

// failingLogNode is a node whose coordinator logs through a failingLog:
// fast, the single-store fast path; else the general path (the log is
// hidden behind a plain tx.Log, so the Context persists and commits).
func failingLogNode(t *testing.T, fast bool) (*generalNode, *failingLog) {
	db, err := badger.Open(badger.DefaultOptions("").WithInMemory(true).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	bl, err := tx.NewBadgerLog(db, tx.BadgerLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingLog{BadgerLog: bl}
	var log tx.Log = fl
	if !fast {
		log = struct{ tx.Log }{fl}
	}
	coord, err := tx.Open(tx.Options{Log: log, ExpiryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	n := &generalNode{t: t, db: db, coord: coord, fast: fast}
	n.open()
	t.Cleanup(func() {
		n.b.Close()
		_ = coord.Close() // failed: its log is gone
		db.Close()
	})
	return n, fl
}

// storedDepth counts the events and bytes of every entry stored for queue
// qid, from the keys.
func storedDepth(t testing.TB, db *badger.DB, qid uint32) (events, bytes int64) {
	t.Helper()
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix(qid)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if k, ok := decodeEntryKey(it.Item().Key()); ok {
				events += int64(k.count)
				bytes += int64(k.size)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return events, bytes
}

// checkDepthStored fails t unless queue name's depth is what is stored for
// it and the counter the limits bound is that plus reserved events.
// Under evictMu: a background pass's removeDepth between the loads would
// tear them.
func checkDepthStored(t testing.TB, b *Backend, name string, reserved int64, what string) {
	t.Helper()
	q, err := b.queue(name)
	if err != nil {
		t.Fatal(err)
	}
	b.evictMu.Lock()
	ev, by := storedDepth(t, b.db, q.id)
	events, bytes, used := q.events.Load(), q.bytes.Load(), q.usedEvents.Load()
	b.evictMu.Unlock()
	if events != ev || bytes != by || used != ev+reserved {
		t.Fatalf("%s: depth %d events / %d bytes, limits' counter %d; stored %d / %d, reservations %d", what, events, bytes, used, ev, by, reserved)
	}
}

// A producer whose commit failed in the log (tx.ErrLogFailed: the outcome
// is unknown, the Context neither commits nor rolls it back) and which is
// then handed a new transaction dropped the old one's reservation as if
// it had aborted: where the commit had landed (the fast path's write went
// through and its sync failed; the general path's entries are persisted
// and stay), those stored events were counted in neither the depth nor
// the limits' counter, which both drifted low (producers past the bound).
//
// between: before that StartTx, the landed events are deleted by a
// truncate or expire (a TTL eviction pass): they were taken from the depth
// and the limits' counter there, and again from the counter when StartTx
// found nothing stored and released the reservation (both 3 low).
func TestLogFailedProducerNewTxDepth(t *testing.T) {
	for _, c := range []struct {
		fast    bool
		mode    int32
		between string
	}{
		{true, logFailsAfterWrite, ""}, {true, logFailsBeforeWrite, ""}, {false, logFailsBeforeWrite, ""},
		{true, logFailsAfterWrite, "truncate"}, {true, logFailsAfterWrite, "expire"},
		{true, logFailsBeforeWrite, "truncate"}, {true, logFailsBeforeWrite, "expire"},
		{false, logFailsBeforeWrite, "expire"}, // a truncate there needs a transaction
	} {
		t.Run(fmt.Sprintf("fast=%v/mode=%d/%s", c.fast, c.mode, c.between), func(t *testing.T) {
			n, fl := failingLogNode(t, c.fast)
			must := mustT(t)
			must(n.qs.CreateQueue("q", queue.Config{Partitions: 2, MaxEvents: 10, TTL: time.Minute}))
			p, err := n.qs.Producer("q")
			must(err)
			// The general path's log fails at the commit record, after the
			// entries were persisted: armed by a participant persisting
			// after the producer.
			parts := []tx.Participant{p}
			if !c.fast {
				parts = append(parts, &armOnPersist{arm: func() { fl.mode.Store(c.mode) }})
			}
			ctx := n.coord.NewContext(parts...)
			_, err = ctx.Start(time.Minute)
			must(err)
			for i := range 3 {
				must(p.Enqueue(context.Background(), queue.Event{Payload: []byte("x"), Key: []byte{byte(i)}}))
			}
			if c.fast {
				fl.mode.Store(c.mode)
			}
			if err := ctx.Finish(); !errors.Is(err, tx.ErrLogFailed) {
				t.Fatalf("commit through a failing log: %v, want tx.ErrLogFailed", err)
			}
			switch c.between {
			case "truncate":
				must(n.qs.TruncateQueue("q"))
			case "expire":
				n.b.opts.Now = func() time.Time { return time.Now().Add(time.Hour) } // no background pass runs
				must(n.b.evict())
			}
			// The failed coordinator starts nothing more: the next
			// transaction comes from another one.
			other, err := tx.Open(tx.Options{ExpiryInterval: -1})
			must(err)
			defer other.Close()
			next, err := other.StartShort(time.Minute)
			must(err)
			must(p.StartTx(next))
			checkDepthStored(t, n.b, "q", 0, "after the next StartTx")
		})
	}
}

// armOnPersist is a general-path participant that only runs arm in its
// Persist.
type armOnPersist struct{ arm func() }

func (a *armOnPersist) StartTx(*tx.Tx) error  { return nil }
func (a *armOnPersist) UpdateTx(*tx.Tx) error { return nil }
func (a *armOnPersist) ChangeKeys() [][]byte  { return nil }
func (a *armOnPersist) Persist() error        { a.arm(); return nil }
func (a *armOnPersist) PostCommit()           {}
func (a *armOnPersist) Rollback() error       { return nil }
