package runtime

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/internal/badgerutil"
	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/queue/badgerq"
	"github.com/flowrun/flowrun/tx"
)

// ErrLocked: another process (a running app) holds the store. Badger allows
// one process per directory.
var ErrLocked = errors.New("app is running (store locked)")

// DefaultDataDir is where an app's store lives unless --data says otherwise.
func DefaultDataDir(app string) string { return filepath.Join(".flowrun", app) }

// store is the one Badger DB of an app with the coordinator and the queues
// on it: every participant stages into the DB that holds the tx log, so every
// step takes the single-store fast path.
type store struct {
	dir     string
	durable bool
	db      *badger.DB
	coord   *tx.Coordinator
	qb      *badgerq.Backend
	queues  *queue.Queues
	pruner  *tx.Pruner
	// reads counts read-only transactions (state and queue views), which
	// end in an abort by design.
	reads atomic.Uint64

	// The inspection reads in progress. useMu guards them all.
	useMu sync.Mutex
	// inUse counts them (enter), and close waits for them: a read of a
	// running app's store (the HTTP API's) can outlast the server's
	// shutdown, and Badger's tables are unmapped by its close, so a read
	// going on after it crashes the process.
	useDone *sync.Cond
	inUse   int
	closing bool
	// views are the state reads among them (view), each with the bound
	// state GC must not pass while it reads (gcHold).
	views map[*tx.Tx]uint64
}

// ErrStoreClosed: the app's store is closed (or closing) and can no longer
// be read.
var ErrStoreClosed = errors.New("runtime: the store is closed")

// enter begins an inspection read: ErrStoreClosed once close began, else
// a function that ends it.
func (s *store) enter() (exit func(), err error) {
	s.useMu.Lock()
	defer s.useMu.Unlock()
	if s.closing {
		return nil, ErrStoreClosed
	}
	s.inUse++
	return func() {
		s.useMu.Lock()
		defer s.useMu.Unlock()
		if s.inUse--; s.inUse == 0 && s.useDone != nil {
			s.useDone.Broadcast()
		}
	}, nil
}

// queueReadHook, set by tests only, is called by the app's own queue
// reads (Status, Scale's bound) once they began.
var queueReadHook func()

// queueRead begins one of the app's own queue reads behind the HTTP API
// (Status, Scale's bound), which read Badger, as an inspection read
// (enter): !ok once the store is closing.
func (a *App) queueRead() (exit func(), ok bool) {
	exit, err := a.st.enter()
	if err != nil {
		return nil, false
	}
	if h := queueReadHook; h != nil {
		h()
	}
	return exit, true
}

// endUse refuses new inspection reads and waits for those in progress.
func (s *store) endUse() {
	s.useMu.Lock()
	defer s.useMu.Unlock()
	s.closing = true
	if s.useDone == nil {
		s.useDone = sync.NewCond(&s.useMu)
	}
	for s.inUse > 0 {
		s.useDone.Wait()
	}
}

// holdGC keeps state GC (App.gcState) below what the read t needs until
// release: every version below t's FirstInProgress is settled and visible
// to t, so GC under it changes none of t's reads. The coordinator counts t
// as in progress, which holds the GC watermark, only until t times out
// (viewTimeout): a read that outlived that (a long scan of a running app)
// read versions GC had folded or deleted since — wrong values.
func (s *store) holdGC(t *tx.Tx) (release func()) {
	s.useMu.Lock()
	defer s.useMu.Unlock()
	if s.views == nil {
		s.views = map[*tx.Tx]uint64{}
	}
	s.views[t] = t.FirstInProgress()
	return func() {
		s.useMu.Lock()
		delete(s.views, t)
		s.useMu.Unlock()
	}
}

// gcHold is the lowest bound a read in progress holds state GC to (holdGC);
// 0 if none does.
func (s *store) gcHold() uint64 {
	s.useMu.Lock()
	defer s.useMu.Unlock()
	var b uint64
	for _, h := range s.views {
		if b == 0 || h < b {
			b = h
		}
	}
	return b
}

type storeOptions struct {
	durable bool
	// existing: the directory must hold a store already (read commands).
	existing bool
	// minFreeDisk: the disk reserve a new or running app keeps
	// (checkDiskSpace); not checked for existing (read commands).
	minFreeDisk int64
	// log receives Badger's warnings (nil: dropped).
	log           *slog.Logger
	evictInterval time.Duration
	gcInterval    time.Duration
}

func openStore(dir string, o storeOptions) (*store, error) {
	if !o.existing {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("data directory: %w", err)
		}
		if err := checkDiskSpace(dir, o.minFreeDisk); err != nil {
			return nil, err
		}
	}
	// Badger's own lock, held while the directory is checked and repaired:
	// a running app may be creating a log file (empty for an instant)
	// that RemoveEmptyLogFiles would take for a crash's leftover.
	unlock, err := lockStoreDir(dir)
	if err != nil {
		return nil, err
	}
	err = checkStoreDir(dir, o.existing)
	if err == nil {
		if err = badgerutil.RemoveEmptyLogFiles(dir); err != nil {
			err = fmt.Errorf("data directory %s: %w", dir, err)
		}
	}
	unlock() // Badger takes it again as it opens
	if err != nil {
		return nil, err
	}
	var blog badger.Logger
	if o.log != nil {
		blog = badgerLog{o.log}
	}
	db, err := badgerq.OpenDBLogged(dir, o.durable, blog)
	if err != nil {
		if strings.Contains(err.Error(), "Another process is using this Badger database") {
			return nil, fmt.Errorf("%w: %s is in use by another flowrun process; stop it or use its status endpoint", ErrLocked, dir)
		}
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	s := &store{dir: dir, db: db, durable: o.durable}
	// Durability comes from the log's group sync (one DB.Sync shared by
	// concurrent commits); the DB itself is opened without SyncWrites.
	log, err := tx.NewBadgerLog(db, tx.BadgerLogOptions{Sync: o.durable})
	if err != nil {
		db.Close()
		return nil, err
	}
	s.coord, err = tx.Open(tx.Options{Log: log, EndRecoveredTransactions: true})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	// State stages its writes on the fast path only: no invalid data ever.
	s.pruner = s.coord.RegisterPruner("state")
	s.pruner.Report(tx.NoInvalidData)
	s.qb, err = badgerq.Open(db, badgerq.Options{
		Coordinator: s.coord, FastPath: true, Sync: o.durable,
		EvictInterval: o.evictInterval, GCInterval: o.gcInterval,
	})
	if err != nil {
		s.coord.Close()
		db.Close()
		return nil, fmt.Errorf("open queues in %s: %w", dir, err)
	}
	s.queues = queue.New(s.qb)
	return s, nil
}

func (s *store) close() error {
	s.endUse()
	var errs []error
	if s.qb != nil {
		errs = append(errs, s.qb.Close())
	}
	if s.pruner != nil {
		s.pruner.Unregister()
	}
	if s.coord != nil {
		errs = append(errs, s.coord.Close())
	}
	if s.db != nil {
		errs = append(errs, s.db.Close())
	}
	return errors.Join(errs...)
}

// lockStoreDir takes the lock Badger holds while a DB is open (a flock on
// the directory itself; dir/LOCK only records the pid — locking that file,
// as this did, excluded nothing); ErrLocked if a running app holds it.
func lockStoreDir(dir string) (unlock func(), err error) {
	unlock, err = badgerutil.LockDir(dir)
	if errors.Is(err, badgerutil.ErrInUse) {
		return nil, fmt.Errorf("%w: %s is in use by another flowrun process; stop it or use its status endpoint", ErrLocked, dir)
	}
	return unlock, err
}
