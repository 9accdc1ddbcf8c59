package tx

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	modelAccounts = 8
	modelInitial  = 1000
)

// bank runs transfers between accounts in a versioned Badger table.
type bank struct {
	c         *Coordinator
	newTable  func() participantTable
	committed sync.Map // write pointer -> true: every pointer of a committed transfer
	aborted   sync.Map // write pointer -> true
	commits   atomic.Int64
}

// participantTable is a test table that is either a plain Participant
// (general path) or a Stager (fast path).
type participantTable interface {
	Participant
	Get(key string) (int64, uint64, bool, error)
	Put(key string, v int64)
}

func acct(i int) string   { return fmt.Sprintf("a%02d", i) }
func opsKey(i int) string { return fmt.Sprintf("n%02d", i) }

func (bk *bank) init(t *testing.T) {
	tb := bk.newTable()
	ctx := bk.c.NewContext(tb)
	tx, err := ctx.Start(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < modelAccounts; i++ {
		tb.Put(acct(i), modelInitial)
		tb.Put(opsKey(i), 0)
	}
	if err := ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	bk.committed.Store(tx.WritePointer, true)
}

// read returns every balance and op count seen by one snapshot and checks
// that only committed versions are visible.
func (bk *bank) read(tb participantTable) (total, ops int64, err error) {
	for i := 0; i < modelAccounts; i++ {
		for _, k := range []string{acct(i), opsKey(i)} {
			v, ver, ok, err := tb.Get(k)
			if err != nil {
				return 0, 0, err
			}
			if !ok {
				return 0, 0, fmt.Errorf("%s missing", k)
			}
			if _, bad := bk.aborted.Load(ver); bad {
				return 0, 0, fmt.Errorf("%s: read version %d of an aborted transaction", k, ver)
			}
			if _, good := bk.committed.Load(ver); !good {
				// It may have committed a moment ago and not be recorded yet:
				// the committer records before Finish returns... so it must be.
				return 0, 0, fmt.Errorf("%s: read version %d, which is not a committed transaction", k, ver)
			}
			if k[0] == 'a' {
				total += v
			} else {
				ops += v
			}
		}
	}
	return total, ops, nil
}

func (bk *bank) transfer(rng *rand.Rand) error {
	tb := bk.newTable()
	ctx := bk.c.NewContext(tb)
	for {
		tx, err := ctx.Start(10 * time.Second)
		if err != nil {
			return err
		}
		a, b := rng.IntN(modelAccounts), rng.IntN(modelAccounts-1)
		if b >= a {
			b++
		}
		va, _, _, err := tb.Get(acct(a))
		if err != nil {
			return err
		}
		vb, _, _, _ := tb.Get(acct(b))
		na, _, _, _ := tb.Get(opsKey(a))
		nb, _, _, _ := tb.Get(opsKey(b))
		amt := int64(rng.IntN(50))
		tb.Put(acct(a), va-amt)
		tb.Put(acct(b), vb+amt)
		tb.Put(opsKey(a), na+1)
		tb.Put(opsKey(b), nb+1)
		if rng.IntN(10) == 0 { // a voluntary abort
			bk.aborted.Store(tx.WritePointer, true)
			if err := ctx.Abort(nil); err != nil {
				return err
			}
			continue
		}
		// Recorded before Finish: a reader that sees the version right after
		// the commit finds it here. It is deleted again if the commit fails.
		bk.committed.Store(tx.WritePointer, true)
		err = ctx.Finish()
		if errors.Is(err, ErrConflict) {
			bk.committed.Delete(tx.WritePointer)
			bk.aborted.Store(tx.WritePointer, true)
			continue
		}
		if err != nil {
			return err
		}
		bk.commits.Add(1)
		// Every later snapshot sees this commit (or a newer write).
		check := bk.newTable()
		cctx := bk.c.NewContext(check)
		if _, err := cctx.Start(time.Minute); err != nil {
			return err
		}
		_, ver, _, err := check.Get(acct(a))
		cctx.Abort(nil)
		if err != nil {
			return err
		}
		if ver < tx.WritePointer {
			return fmt.Errorf("commit %d invisible to a later snapshot (saw version %d)", tx.WritePointer, ver)
		}
		return nil
	}
}

func runBank(t *testing.T, bk *bank, workers, perWorker int) {
	bk.init(t)
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	stop := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 7))
			for i := 0; i < perWorker; i++ {
				if err := bk.transfer(rng); err != nil {
					errs <- err
					return
				}
			}
		}(uint64(w))
	}
	// A reader checks the invariant on consistent snapshots meanwhile.
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			tb := bk.newTable()
			ctx := bk.c.NewContext(tb)
			if _, err := ctx.Start(time.Minute); err != nil {
				errs <- err
				return
			}
			total, _, err := bk.read(tb)
			ctx.Abort(nil)
			if err == nil && total != modelAccounts*modelInitial {
				err = fmt.Errorf("snapshot total %d, want %d", total, modelAccounts*modelInitial)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	readerDone.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	tb := bk.newTable()
	ctx := bk.c.NewContext(tb)
	ctx.Start(time.Minute)
	total, ops, err := bk.read(tb)
	ctx.Abort(nil)
	if err != nil {
		t.Fatal(err)
	}
	if total != modelAccounts*modelInitial {
		t.Fatalf("total %d, want %d", total, modelAccounts*modelInitial)
	}
	if ops != 2*bk.commits.Load() {
		t.Fatalf("lost update: op counts sum to %d, want 2 x %d commits", ops, bk.commits.Load())
	}
	s := bk.c.Stats()
	t.Logf("commits %d, conflicts %d, aborted %d", bk.commits.Load(), s.Conflicts, s.Aborted)
	if s.Conflicts == 0 {
		t.Fatal("the model must exercise conflicts")
	}
}

func TestModelTransfersFastPath(t *testing.T) {
	db := openBadger(t, t.TempDir(), false)
	defer db.Close()
	bl, _ := NewBadgerLog(db, BadgerLogOptions{})
	c := mustOpen(t, Options{Log: bl, SnapshotEvery: 200})
	bk := &bank{c: c, newTable: func() participantTable { return stagedTable{newTable(db, "t/")} }}
	runBank(t, bk, 8, 150)
}

func TestModelTransfersGeneralPath(t *testing.T) {
	dir := t.TempDir()
	db := openBadger(t, dir+"/data", false)
	defer db.Close()
	fl, err := OpenFileLog(dir+"/txlog", FileLogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := mustOpen(t, Options{Log: fl, SnapshotEvery: 200})
	bk := &bank{c: c, newTable: func() participantTable { return newTable(db, "t/") }}
	runBank(t, bk, 8, 150)
}
