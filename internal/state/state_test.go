package state

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/tx"
)

type env struct {
	db    *badger.DB
	coord *tx.Coordinator
	dir   string
	fast  bool
	// valueLogFile, when set, is Badger's value log file size: a value
	// over it is refused.
	valueLogFile int64
	// memTable, when set, is Badger's memtable size (8 MiB otherwise).
	memTable int64
	// badgerOpts, when set, changes Badger's options.
	badgerOpts func(badger.Options) badger.Options
}

// newEnv opens a Badger DB and a coordinator. fast: the coordinator logs to a
// BadgerLog on the same DB, so the Store takes the single-store fast path;
// otherwise the coordinator is in memory and the Store persists separately.
func newEnv(t testing.TB, fast bool) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), fast: fast}
	e.open(t)
	t.Cleanup(func() { e.close() })
	return e
}

func (e *env) open(t testing.TB) {
	t.Helper()
	o := badger.DefaultOptions(e.dir).WithLogger(nil).
		WithMemTableSize(cmp.Or(e.memTable, 8<<20)).WithNumMemtables(2).WithBlockCacheSize(4 << 20)
	if e.valueLogFile > 0 {
		o = o.WithValueLogFileSize(e.valueLogFile)
	}
	if e.badgerOpts != nil {
		o = e.badgerOpts(o)
	}
	db, err := badger.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	opts := tx.Options{ExpiryInterval: -1}
	if e.fast {
		l, err := tx.NewBadgerLog(db, tx.BadgerLogOptions{})
		if err != nil {
			t.Fatal(err)
		}
		opts.Log = l
	}
	c, err := tx.Open(opts)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	e.db, e.coord = db, c
}

func (e *env) close() error {
	if e.db == nil {
		return nil
	}
	err := errors.Join(e.coord.Close(), e.db.Close())
	e.db, e.coord = nil, nil
	return err
}

// reopen closes the DB and opens it again, with a coordinator recovered from
// its log (fast path only: the other coordinator is in memory).
func (e *env) reopen(t testing.TB) {
	t.Helper()
	if err := e.close(); err != nil {
		t.Fatal(err)
	}
	e.open(t)
}

func (e *env) store(t testing.TB) *Store {
	t.Helper()
	s, err := Open(e.db, "app", "fl")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// step is one transaction over a store.
type step struct {
	t   testing.TB
	s   *Store
	ctx *tx.Context
}

func (e *env) begin(t testing.TB, s *Store) *step {
	t.Helper()
	ctx := e.coord.NewContext(s)
	if _, err := ctx.Start(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	return &step{t: t, s: s, ctx: ctx}
}

func (st *step) put(table, k, v string) {
	st.t.Helper()
	if err := st.s.Table(table).Put([]byte(k), []byte(v)); err != nil {
		st.t.Fatal(err)
	}
}

func (st *step) del(table, k string) {
	st.t.Helper()
	if err := st.s.Table(table).Delete([]byte(k)); err != nil {
		st.t.Fatal(err)
	}
}

func (st *step) get(table, k string) string {
	st.t.Helper()
	v, ok, err := st.s.Table(table).Get([]byte(k))
	if err != nil {
		st.t.Fatal(err)
	}
	if !ok {
		return "<none>"
	}
	return string(v)
}

func (st *step) add(name, k string, d int64) {
	st.t.Helper()
	if err := st.s.Counters(name).Add([]byte(k), d); err != nil {
		st.t.Fatal(err)
	}
}

func (st *step) count(name, k string) int64 {
	st.t.Helper()
	n, err := st.s.Counters(name).Get([]byte(k))
	if err != nil {
		st.t.Fatal(err)
	}
	return n
}

func (st *step) commit() {
	st.t.Helper()
	if err := st.ctx.Finish(); err != nil {
		st.t.Fatal(err)
	}
}

func (st *step) abort() {
	st.t.Helper()
	if err := st.ctx.Abort(nil); err != nil {
		st.t.Fatal(err)
	}
}

func (st *step) scan(table string, o flowlet.ScanOptions) string {
	st.t.Helper()
	it := st.s.Table(table).Scan(o)
	defer it.Close()
	var b bytes.Buffer
	for it.Next() {
		fmt.Fprintf(&b, "%q=%q ", it.Key(), it.Value())
	}
	if err := it.Err(); err != nil {
		st.t.Fatal(err)
	}
	return b.String()
}

func (st *step) scanCounters(name string, o flowlet.ScanOptions) string {
	st.t.Helper()
	it := st.s.Counters(name).Scan(o)
	defer it.Close()
	var b bytes.Buffer
	for it.Next() {
		fmt.Fprintf(&b, "%q=%d ", it.Key(), it.Count())
	}
	if err := it.Err(); err != nil {
		st.t.Fatal(err)
	}
	return b.String()
}

func bothPaths(t *testing.T, f func(t *testing.T, e *env)) {
	for _, fast := range []bool{true, false} {
		name := "persist"
		if fast {
			name = "staged"
		}
		t.Run(name, func(t *testing.T) { f(t, newEnv(t, fast)) })
	}
}

func TestSnapshotAndReadYourWrites(t *testing.T) {
	bothPaths(t, func(t *testing.T, e *env) {
		a, b, c := e.store(t), e.store(t), e.store(t)
		s := e.begin(t, a)
		s.put("t", "k", "1")
		if got := s.get("t", "k"); got != "1" {
			t.Fatalf("read your write: %s", got)
		}
		s.commit()

		old := e.begin(t, b) // snapshot: k=1
		s = e.begin(t, a)
		s.put("t", "k", "2")
		s.put("t", "new", "x")
		s.commit()
		if got := old.get("t", "k"); got != "1" {
			t.Fatalf("snapshot read: %s, want 1", got)
		}
		if got := old.get("t", "new"); got != "<none>" {
			t.Fatalf("snapshot sees a later commit: %s", got)
		}
		old.put("t", "mine", "m")
		old.del("t", "k")
		if got := old.get("t", "k"); got != "<none>" {
			t.Fatalf("own delete not seen: %s", got)
		}
		if got := old.get("t", "mine"); got != "m" {
			t.Fatalf("own put not seen: %s", got)
		}
		old.abort()

		s = e.begin(t, c)
		if got := s.get("t", "k"); got != "2" {
			t.Fatalf("after commit: %s", got)
		}
		if got := s.get("t", "mine"); got != "<none>" {
			t.Fatalf("aborted write visible: %s", got)
		}
		s.abort()
	})
}

func TestAbortDropsWrites(t *testing.T) {
	bothPaths(t, func(t *testing.T, e *env) {
		a := e.store(t)
		s := e.begin(t, a)
		s.put("t", "k", "v")
		s.add("c", "n", 5)
		s.abort()
		s = e.begin(t, a)
		if got := s.get("t", "k"); got != "<none>" {
			t.Fatalf("aborted put visible: %s", got)
		}
		if n := s.count("c", "n"); n != 0 {
			t.Fatalf("aborted add visible: %d", n)
		}
		s.abort()
		// Nothing of the aborted transaction is left in the store.
		if n := countKeys(t, e.db); n != 0 {
			t.Fatalf("%d state keys after abort", n)
		}
	})
}

// fillKeys commits a step on s that puts n keys, "0" to n-1, with value "v"
// in table t and adds 1 to each in counters c.
func fillKeys(t testing.TB, e *env, s *Store, n int) {
	t.Helper()
	st := e.begin(t, s)
	for i := range n {
		st.put("t", fmt.Sprint(i), "v")
		st.add("c", fmt.Sprint(i), 1)
	}
	st.commit()
}

func countKeys(t testing.TB, db *badger.DB) int {
	n := 0
	db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(Prefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	return n
}

func TestConflictingPuts(t *testing.T) {
	bothPaths(t, func(t *testing.T, e *env) {
		a, b := e.begin(t, e.store(t)), e.begin(t, e.store(t))
		a.put("t", "k", "a")
		b.put("t", "k", "b")
		a.commit()
		err := b.ctx.Finish()
		if !errors.Is(err, tx.ErrConflict) {
			t.Fatalf("second writer: %v, want ErrConflict", err)
		}
		s := e.begin(t, e.store(t))
		if got := s.get("t", "k"); got != "a" {
			t.Fatalf("k = %s, want a", got)
		}
		s.abort()

		// Different keys, or the same key in different tables, do not conflict.
		a, b = e.begin(t, e.store(t)), e.begin(t, e.store(t))
		a.put("t", "x", "1")
		b.put("t", "y", "1")
		b.put("u", "x", "1")
		b.del("other", "x")
		a.commit()
		b.commit()
	})
}

func TestCountersNeverConflict(t *testing.T) {
	bothPaths(t, func(t *testing.T, e *env) {
		const workers, steps = 8, 100
		errs := make(chan error, workers)
		for w := range workers {
			go func() {
				s := e.store(t)
				ctx := e.coord.NewContext(s)
				for i := range steps {
					if _, err := ctx.Start(10 * time.Second); err != nil {
						errs <- err
						return
					}
					c := s.Counters("hits")
					c.Add([]byte("hot"), 1)
					c.Add([]byte("hot"), 2)
					c.Add([]byte(fmt.Sprint("w", w)), int64(i))
					if i%10 == 0 { // reads do not make Adds conflict either
						if _, err := c.Get([]byte("hot")); err != nil {
							errs <- err
							return
						}
					}
					if err := ctx.Finish(); err != nil {
						errs <- fmt.Errorf("worker %d step %d: %w", w, i, err)
						return
					}
				}
				errs <- nil
			}()
		}
		for range workers {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		s := e.begin(t, e.store(t))
		if n := s.count("hits", "hot"); n != 3*workers*steps {
			t.Fatalf("hot = %d, want %d", n, 3*workers*steps)
		}
		if n := s.count("hits", "w3"); n != steps*(steps-1)/2 {
			t.Fatalf("w3 = %d", n)
		}
		s.add("hits", "hot", -1)
		if n := s.count("hits", "hot"); n != 3*workers*steps-1 {
			t.Fatalf("read your add: %d", n)
		}
		s.abort()
	})
}

func TestScan(t *testing.T) {
	bothPaths(t, func(t *testing.T, e *env) {
		s := e.begin(t, e.store(t))
		for _, k := range []string{"b", "a", "a\x00", "a\x00b", "ab", "c/1", "c/2", "c/3", "d", "\x00", "\xff"} {
			s.put("t", k, "v"+k)
		}
		s.put("other", "a", "no")
		s.commit()

		s = e.begin(t, e.store(t))
		all := s.scan("t", flowlet.ScanOptions{})
		want := `"\x00"="v\x00" "a"="va" "a\x00"="va\x00" "a\x00b"="va\x00b" "ab"="vab" "b"="vb" "c/1"="vc/1" "c/2"="vc/2" "c/3"="vc/3" "d"="vd" "\xff"="v\xff" `
		if all != want {
			t.Fatalf("scan all:\n got %s\nwant %s", all, want)
		}
		cases := []struct {
			o    flowlet.ScanOptions
			want string
		}{
			{flowlet.ScanOptions{Prefix: []byte("c/")}, `"c/1"="vc/1" "c/2"="vc/2" "c/3"="vc/3" `},
			{flowlet.ScanOptions{Prefix: []byte("c/"), Limit: 2}, `"c/1"="vc/1" "c/2"="vc/2" `},
			{flowlet.ScanOptions{Prefix: []byte("a\x00")}, `"a\x00"="va\x00" "a\x00b"="va\x00b" `},
			{flowlet.ScanOptions{Start: []byte("ab"), End: []byte("c/3")}, `"ab"="vab" "b"="vb" "c/1"="vc/1" "c/2"="vc/2" `},
			{flowlet.ScanOptions{Prefix: []byte("c"), Start: []byte("c/2")}, `"c/2"="vc/2" "c/3"="vc/3" `},
			{flowlet.ScanOptions{Start: []byte("zz")}, `"\xff"="v\xff" `},
			{flowlet.ScanOptions{Start: []byte("\xff\x00")}, ``},
		}
		for _, c := range cases {
			if got := s.scan("t", c.o); got != c.want {
				t.Errorf("scan %v:\n got %s\nwant %s", c.o, got, c.want)
			}
		}
		// The step's own writes merge in: new keys, overwrites, deletes.
		s.put("t", "c/1", "new")
		s.put("t", "c/15", "ins")
		s.del("t", "c/2")
		s.put("t", "c/4", "end")
		s.del("t", "c/9") // deleting a missing key
		got := s.scan("t", flowlet.ScanOptions{Prefix: []byte("c/")})
		if want := `"c/1"="new" "c/15"="ins" "c/3"="vc/3" "c/4"="end" `; got != want {
			t.Fatalf("scan with own writes:\n got %s\nwant %s", got, want)
		}
		got = s.scan("t", flowlet.ScanOptions{Prefix: []byte("c/"), Limit: 3})
		if want := `"c/1"="new" "c/15"="ins" "c/3"="vc/3" `; got != want {
			t.Fatalf("scan with own writes and limit:\n got %s\nwant %s", got, want)
		}
		s.commit()
		s = e.begin(t, e.store(t))
		got = s.scan("t", flowlet.ScanOptions{Prefix: []byte("c/")})
		if want := `"c/1"="new" "c/15"="ins" "c/3"="vc/3" "c/4"="end" `; got != want {
			t.Fatalf("scan after commit:\n got %s\nwant %s", got, want)
		}
		s.add("n", "b", 2)
		s.add("n", "a", 1)
		s.add("n", "c", 3)
		s.commit()
		s = e.begin(t, e.store(t))
		s.add("n", "b", 10)
		s.add("n", "bb", 7)
		if got, want := s.scanCounters("n", flowlet.ScanOptions{}), `"a"=1 "b"=12 "bb"=7 "c"=3 `; got != want {
			t.Fatalf("counter scan:\n got %s\nwant %s", got, want)
		}
		if got, want := s.scanCounters("n", flowlet.ScanOptions{Start: []byte("b"), Limit: 2}), `"b"=12 "bb"=7 `; got != want {
			t.Fatalf("counter scan:\n got %s\nwant %s", got, want)
		}
		s.abort()
	})
}

func TestMisuse(t *testing.T) {
	e := newEnv(t, true)
	s := e.store(t)
	if err := s.Table("t").Put([]byte("k"), nil); !errors.Is(err, ErrNoTransaction) {
		t.Fatalf("put outside a tx: %v", err)
	}
	st := e.begin(t, s)
	if err := s.Table("Bad Name").Put([]byte("k"), nil); !errors.Is(err, flowlet.ErrInvalidName) {
		t.Fatalf("bad table name: %v, want ErrInvalidName", err)
	}
	if _, err := s.Counters("Bad Name").Get([]byte("k")); !errors.Is(err, flowlet.ErrInvalidName) {
		t.Fatalf("bad counters name: %v, want ErrInvalidName", err)
	}
	huge := make([]byte, flowlet.MaxKeySize+1)
	for what, err := range map[string]error{
		"put":    s.Table("t").Put(huge, nil),
		"delete": s.Table("t").Delete(huge),
		"add":    s.Counters("c").Add(huge, 1),
	} {
		if !errors.Is(err, flowlet.ErrKeyTooLarge) {
			t.Fatalf("%s of a huge key: %v, want ErrKeyTooLarge", what, err)
		}
	}
	if keys := s.ChangeKeys(); len(keys) != 0 {
		t.Fatalf("refused writes buffered: %q", keys)
	}
	for _, names := range [][2]string{{"app", "No"}, {"", "fl"}, {"a/b", "fl"}} {
		if _, err := Open(e.db, names[0], names[1]); !errors.Is(err, flowlet.ErrInvalidName) {
			t.Fatalf("Open(%q, %q): %v, want ErrInvalidName", names[0], names[1], err)
		}
	}
	st.abort()
}

// TestUnclosedIterator: a flowlet that returns without closing an
// iterator (an early return mid-scan) must not crash the step's end:
// Badger panics when a read view is discarded with an iterator open. The
// iterator is dead after the step: Next is false and Err says why.
func TestUnclosedIterator(t *testing.T) {
	bothPaths(t, func(t *testing.T, e *env) {
		s := e.store(t)
		st := e.begin(t, s)
		st.put("t", "a", "1")
		st.add("c", "a", 1)
		st.commit()
		for _, end := range []func(*step){(*step).commit, (*step).abort} {
			st = e.begin(t, s)
			it := s.Table("t").Scan(flowlet.ScanOptions{})
			cit := s.Counters("c").Scan(flowlet.ScanOptions{})
			if !it.Next() || !cit.Next() {
				t.Fatal("nothing scanned")
			}
			end(st) // without Close
			if it.Next() || cit.Next() {
				t.Fatal("an iterator of an ended step goes on")
			}
			if !errors.Is(it.Err(), ErrNoTransaction) || !errors.Is(cit.Err(), ErrNoTransaction) {
				t.Fatalf("errors after the step: %v, %v", it.Err(), cit.Err())
			}
			if err := errors.Join(it.Close(), cit.Close()); err != nil {
				t.Fatal(err)
			}
		}
		st = e.begin(t, s)
		if got := st.scan("t", flowlet.ScanOptions{}); got != `"a"="1" ` {
			t.Fatalf("scan after: %s", got)
		}
		st.commit()
	})
}

// TestClosedIteratorsLeave: the step keeps only its open iterators (to
// close them at its end), not every one it made: a flowlet that scans per
// event would otherwise hold each closed iterator's Badger state (about a
// KiB) until the step ends. An iterator still open at the end is closed,
// whichever others were closed before it.
func TestClosedIteratorsLeave(t *testing.T) {
	e := newEnv(t, true)
	s := e.store(t)
	st := e.begin(t, s)
	st.put("t", "a", "1")
	st.commit()
	st = e.begin(t, s)
	open := []flowlet.Iterator{s.Table("t").Scan(flowlet.ScanOptions{}), s.Table("t").Scan(flowlet.ScanOptions{})}
	for range 1000 {
		if got := st.scan("t", flowlet.ScanOptions{}); got != `"a"="1" ` {
			t.Fatalf("scan: %s", got)
		}
		st.scanCounters("c", flowlet.ScanOptions{})
	}
	kept := s.Counters("c").Scan(flowlet.ScanOptions{})
	open[0].Close()
	if n := len(s.scans); n != 2 {
		t.Errorf("the step holds %d iterators, want its 2 open ones", n)
	}
	st.commit()
	for _, it := range []interface {
		Next() bool
		Err() error
	}{open[1], kept} {
		if it.Next() || !errors.Is(it.Err(), ErrNoTransaction) {
			t.Fatalf("an iterator left open went on after the step: %v", it.Err())
		}
	}
	if n := len(s.scans); n != 0 {
		t.Errorf("%d iterators kept after the step", n)
	}
}

// TestCounterScanZeroSum: a counter the step added nothing to in sum (an
// Add of 0, or +1 then -1 as the runtime's undo of a failed event does) is
// not stored by its commit, so the step's own scan does not show it either;
// a stored counter the step brings to 0 stays, and one the step adds 0 to
// shows its stored count.
func TestCounterScanZeroSum(t *testing.T) {
	bothPaths(t, func(t *testing.T, e *env) {
		s := e.begin(t, e.store(t))
		s.add("c", "kept", 5)
		s.add("c", "stored", 7)
		s.commit()
		s = e.begin(t, e.store(t))
		s.add("c", "zero", 0)
		s.add("c", "undone", 1)
		s.add("c", "undone", -1)
		s.add("c", "kept", -5)
		s.add("c", "stored", 2)
		s.add("c", "stored", -2)
		const want = `"kept"=0 "stored"=7 `
		if got := s.scanCounters("c", flowlet.ScanOptions{}); got != want {
			t.Fatalf("scan in the step:\n got %s\nwant %s", got, want)
		}
		s.commit()
		s = e.begin(t, e.store(t))
		if got := s.scanCounters("c", flowlet.ScanOptions{}); got != want {
			t.Fatalf("scan after the commit:\n got %s\nwant %s", got, want)
		}
		s.abort()
	})
}

// TestClosedDB: a Store whose DB was closed under it (a read racing the
// app's shutdown) gives errors wrapping badger.ErrDBClosed: reads did
// panic (Badger panics on an iterator of a closed DB), and Persist hung
// for good (Badger's WriteBatch waits on the closed DB's oracle).
func TestClosedDB(t *testing.T) {
	e := newEnv(t, false)
	s := e.store(t)
	st := e.begin(t, s)
	st.put("t", "a", "1")
	st.commit()
	st = e.begin(t, s)
	st.put("t", "b", "2")
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	_, _, getErr := s.Table("t").Get([]byte("a"))
	_, countErr := s.Counters("c").Get([]byte("a"))
	it := s.Table("t").Scan(flowlet.ScanOptions{})
	it.Next()
	cit := s.Counters("c").Scan(flowlet.ScanOptions{})
	cit.Next()
	for what, err := range map[string]error{"get": getErr, "count": countErr, "scan": it.Err(), "scan counters": cit.Err(),
		"commit": st.ctx.Finish()} {
		if !errors.Is(err, badger.ErrDBClosed) {
			t.Errorf("%s: %v, want ErrDBClosed", what, err)
		}
	}
}

// TestClosedDBMidScan: a scan under way when the DB closes under its Store
// ends with an error wrapping badger.ErrDBClosed. Its next step read the
// closed DB's unmapped tables and killed the process (SIGSEGV).
func TestClosedDBMidScan(t *testing.T) {
	e := newEnv(t, true)
	fillKeys(t, e, e.store(t), 1000)
	e.reopen(t) // the versions are in Badger's tables, not its memtable
	s := e.store(t)
	e.begin(t, s) // the step the scans read in
	it := s.Table("t").Scan(flowlet.ScanOptions{})
	cit := s.Counters("c").Scan(flowlet.ScanOptions{})
	if !it.Next() || !cit.Next() {
		t.Fatal("nothing scanned")
	}
	if err := e.db.Close(); err != nil {
		t.Fatal(err)
	}
	for what, it := range map[string]interface {
		Next() bool
		Err() error
	}{"scan": it, "scan counters": cit} {
		n := 0
		for it.Next() {
			n++
		}
		if !errors.Is(it.Err(), badger.ErrDBClosed) {
			t.Errorf("%s: %d more keys, then %v, want ErrDBClosed", what, n, it.Err())
		}
	}
	if err := s.Rollback(); err != nil { // the step's end, on the closed DB
		t.Fatal(err)
	}
}

// TestRefusedWrite: a step with a value Badger refuses (over its value log
// file size) after many others commits nothing. On the fast path nothing
// is written; on the persist path Badger's write batches have committed
// part of the step before the refusal, and Rollback removes them.
func TestRefusedWrite(t *testing.T) {
	for _, fast := range []bool{true, false} {
		e := &env{dir: t.TempDir(), fast: fast, valueLogFile: 1 << 20}
		e.open(t)
		t.Cleanup(func() { e.close() })
		s := e.store(t)
		st := e.begin(t, s)
		for i := range 5000 { // several of Badger's write batches
			st.put("a", fmt.Sprint(i), strings.Repeat("v", 500))
		}
		st.put("z", "huge", strings.Repeat("v", 2<<20))
		if err := st.ctx.Finish(); err == nil {
			t.Fatalf("fast %v: a refused value committed", fast)
		}
		if n := countKeys(t, e.db); n != 0 {
			t.Fatalf("fast %v: %d state keys left by the refused step", fast, n)
		}
		st = e.begin(t, s)
		if got := st.get("a", "0"); got != "<none>" {
			t.Fatalf("fast %v: a write of the refused step reads %q", fast, got)
		}
		st.put("a", "0", "ok")
		st.commit()
	}
}
