package state

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
)

// dump renders everything a step sees, through Get and Scan.
func (st *step) dump(keys int) string {
	st.t.Helper()
	out := st.scan("t", flowlet.ScanOptions{}) + "|" + st.scanCounters("c", flowlet.ScanOptions{}) + "|"
	for i := range keys {
		k := fmt.Sprint("k", i)
		out += fmt.Sprintf("%s=%s/%d ", k, st.get("t", k), st.count("c", k))
	}
	return out
}

// dump renders everything a new step sees, on a Store of its own.
func (e *env) dump(t testing.TB, keys int) string {
	t.Helper()
	st := e.begin(t, e.store(t))
	defer st.abort()
	return st.dump(keys)
}

// randomStep runs a step on s of random writes (randomWrites) and commits
// it; about one step in ten aborts, and one in twenty is invalidated with
// its writes left behind (a failed rollback): invisible, and GC removes
// them.
func randomStep(t *testing.T, e *env, s *Store, rng *rand.Rand, keys int, value string) {
	t.Helper()
	st := e.begin(t, s)
	st.randomWrites(rng, keys, value)
	switch {
	case rng.IntN(10) == 0:
		st.abort()
	case rng.IntN(20) == 0:
		if err := s.Persist(); err != nil {
			t.Fatal(err)
		}
		if err := e.coord.Invalidate(st.ctx.Tx()); err != nil {
			t.Fatal(err)
		}
		s.PostCommit()
	default:
		st.commit()
	}
}

// randomWrites makes one to four writes to keys k0, k1, … (keys of them):
// deletes and puts of value in table t, adds to counters c.
func (st *step) randomWrites(rng *rand.Rand, keys int, value string) {
	st.t.Helper()
	for range 1 + rng.IntN(4) {
		k := fmt.Sprint("k", rng.IntN(keys))
		switch rng.IntN(4) {
		case 0:
			st.del("t", k)
		case 1:
			st.put("t", k, value)
		default:
			st.add("c", k, int64(rng.IntN(7)-2))
		}
	}
}

func TestGCKeepsResults(t *testing.T) {
	bothPaths(t, func(t *testing.T, e *env) {
		const keys = 12
		rng := rand.New(rand.NewPCG(1, 2))
		s := e.store(t)
		var reader *step
		var readerView string
		for i := range 400 {
			if i == 200 {
				// An old reader stays open across GC: its snapshot must survive.
				reader = e.begin(t, e.store(t))
				readerView = reader.dump(keys)
			}
			randomStep(t, e, s, rng, keys, fmt.Sprint(i))
		}
		view := func() string { return e.dump(t, keys) }
		before := view()
		keysBefore := countKeys(t, e.db)

		wm := NewWatermark(e.coord)
		for range 3 {
			bound := wm.Advance()
			if bound > reader.ctx.Tx().FirstInProgress() {
				t.Fatalf("bound %d passes the open reader's first in-progress %d", bound, reader.ctx.Tx().FirstInProgress())
			}
			if _, err := s.GC(bound, e.coord.InvalidList()); err != nil {
				t.Fatal(err)
			}
			if got := view(); got != before {
				t.Fatalf("GC changed results:\nbefore %s\nafter  %s", before, got)
			}
			if got := reader.dump(keys); got != readerView {
				t.Fatalf("GC changed an open snapshot:\nbefore %s\nafter  %s", readerView, got)
			}
		}
		reader.abort()
		var stats GCStats
		for range 3 {
			var err error
			if stats, err = s.GC(wm.Advance(), e.coord.InvalidList()); err != nil {
				t.Fatal(err)
			}
		}
		if got := view(); got != before {
			t.Fatalf("GC changed results:\nbefore %s\nafter  %s", before, got)
		}
		keysAfter := countKeys(t, e.db)
		// At most one version per key and table is left.
		if keysAfter > 2*keys || keysAfter >= keysBefore {
			t.Fatalf("GC left %d of %d versions (last pass %+v)", keysAfter, keysBefore, stats)
		}
		t.Logf("versions %d -> %d", keysBefore, keysAfter)

		// Work goes on after GC, on top of the bases.
		st := e.begin(t, s)
		st.add("c", "k1", 1000)
		st.put("t", "k1", "after")
		st.commit()
		st = e.begin(t, e.store(t))
		if st.count("c", "k1") < 900 || st.get("t", "k1") != "after" {
			t.Fatalf("after GC: %d %s", st.count("c", "k1"), st.get("t", "k1"))
		}
		st.abort()
	})
}

// TestGCChunkedFold folds more deltas than one of its Badger transactions
// deletes.
//
// Each of its transactions holds at most gcOpsPerTxn operations (Badger
// refuses a transaction over its limits, which the bytes of small keys do
// not reach first), and a table key of exactly gcOpsPerTxn versions, the
// newest a delete, goes whole.
func TestGCChunkedFold(t *testing.T) {
	e := newEnv(t, true)
	s := e.store(t)
	const n = gcOpsPerTxn + 17
	for i := range n {
		st := e.begin(t, s)
		st.add("c", "hot", int64(i))
		switch {
		case i < gcOpsPerTxn-1:
			st.put("t", "hot", fmt.Sprint(i))
		case i == gcOpsPerTxn-1:
			st.del("t", "hot")
		}
		st.commit()
	}
	want := int64(n * (n - 1) / 2)
	wm := NewWatermark(e.coord)
	g := newGCBatch(e.db)
	commits := 0
	g.beforeCommit = func() error {
		if commits++; g.ops > gcOpsPerTxn {
			return fmt.Errorf("a transaction of %d operations, want at most %d", g.ops, gcOpsPerTxn)
		}
		return nil
	}
	stats, err := s.gc(g, wm.Advance(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ops := n + gcOpsPerTxn; commits < ops/gcOpsPerTxn+1 {
		t.Fatalf("%d operations in %d transactions, want at most %d each", ops, commits, gcOpsPerTxn)
	}
	st := e.begin(t, s)
	if got, v := st.count("c", "hot"), st.get("t", "hot"); got != want || v != "<none>" {
		t.Fatalf("hot = %d %s, want %d <none> (%+v)", got, v, want, stats)
	}
	st.abort()
	if k := countKeys(t, e.db); k != 1 {
		t.Fatalf("%d versions left, want 1 (%+v)", k, stats)
	}
	// Concurrent with adds: deltas at or above the bound are untouched.
	done := make(chan error)
	go func() {
		s2 := e.store(t)
		ctx := e.coord.NewContext(s2)
		for range 200 {
			ctx.Start(10 * time.Second)
			s2.Counters("c").Add([]byte("hot"), 1)
			if err := ctx.Finish(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range 20 {
		if _, err := s.GC(wm.Advance(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st = e.begin(t, s)
	if got := st.count("c", "hot"); got != want+200 {
		t.Fatalf("hot = %d, want %d", got, want+200)
	}
	st.abort()
}

// TestGCHoldsNoVersionAboveBound: while an old transaction holds the bound
// back, the versions above it pile up (a hot counter takes one per step);
// each GC pass walks them but must not copy them all into memory, as it
// never touches them.
func TestGCHoldsNoVersionAboveBound(t *testing.T) {
	e := newEnv(t, true)
	s := e.store(t)
	st := e.begin(t, s)
	st.add("c", "hot", 1)
	st.commit()
	wm := NewWatermark(e.coord)
	wm.Advance()
	bound := wm.Advance()
	hold := e.begin(t, e.store(t)) // keeps the bound where it is
	const above = 5000
	for range above {
		st := e.begin(t, s)
		st.add("c", "hot", 1)
		st.commit()
	}
	if b := wm.Advance(); b != bound || b == 0 {
		t.Fatalf("bound moved from %d to %d with a transaction open", bound, b)
	}
	allocs := testing.AllocsPerRun(3, func() {
		if _, err := s.GC(bound, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > above/5 {
		t.Fatalf("a GC pass allocates %.0f times for %d versions it does not touch", allocs, above)
	}
	hold.abort()
	st = e.begin(t, s)
	defer st.abort()
	if got := st.count("c", "hot"); got != above+1 {
		t.Fatalf("hot = %d, want %d", got, above+1)
	}
}

// TestGCMalformedKey: a stray key under the flowlet's prefix that no Store
// wrote (the prefix alone, before every key, or too short a key after
// every key) is an error naming it, not a panic, and GC goes on past it
// with the other keys, as past a damaged value. A pass stopped at the
// first one, for good, and dropped what it had not committed yet: with
// the stray key last, no pass ever collected anything (though its stats
// counted it deleted).
func TestGCMalformedKey(t *testing.T) {
	e := newEnv(t, true)
	s := e.store(t)
	const keys = 10
	for range 2 {
		fillKeys(t, e, s, keys)
	}
	for _, k := range [][]byte{s.prefix, append(bytes.Clone(s.prefix), 'z')} {
		if err := e.db.Update(func(txn *badger.Txn) error { return txn.Set(k, nil) }); err != nil {
			t.Fatal(err)
		}
	}
	for pass := range 2 {
		stats, err := s.GC(math.MaxUint64, nil)
		if !errors.Is(err, errBadKey) || !strings.Contains(err.Error(), fmt.Sprintf("%q", s.prefix)) || stats.Damaged != 2 {
			t.Fatalf("GC pass %d over malformed keys: %v (%+v), want errBadKey naming the first, 2 damaged", pass, err, stats)
		}
		// one version of each key in t and c, and the stray keys
		if k := countKeys(t, e.db); k != 2*keys+2 {
			t.Fatalf("GC pass %d: %d versions left, want %d (%+v)", pass, k, 2*keys+2, stats)
		}
	}
}

// TestCounterOverflowWraps: counts are int64 and wrap around (two's
// complement) in every read, and GC's fold keeps the same sum, so a
// counter reads the same whatever order its deltas were summed in.
func TestCounterOverflowWraps(t *testing.T) {
	e := newEnv(t, true)
	s := e.store(t)
	for _, d := range []int64{math.MaxInt64, 1, 5, math.MinInt64, -3} {
		st := e.begin(t, s)
		st.add("c", "k", d)
		st.commit()
	}
	const want = math.MaxInt64 + 1 + 5 + math.MinInt64 - 3 // 2, past two wraps
	read := func() string {
		st := e.begin(t, s)
		defer st.abort()
		return fmt.Sprint(st.count("c", "k"), " ", st.scanCounters("c", flowlet.ScanOptions{}))
	}
	if got := read(); got != fmt.Sprintf(`%d "k"=%d `, want, want) {
		t.Fatalf("before GC: %s, want %d", got, want)
	}
	wm := NewWatermark(e.coord)
	if _, err := s.GC(wm.Advance(), nil); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != fmt.Sprintf(`%d "k"=%d `, want, want) {
		t.Fatalf("after GC: %s, want %d", got, want)
	}
	st := e.begin(t, s)
	defer st.abort()
	st.add("c", "k", math.MaxInt64) // the step's own delta wraps too
	if got := st.count("c", "k"); got != math.MinInt64+1 {
		t.Fatalf("with the step's add: %d", got)
	}
}

// TestGCLargeKeys: the versions of the largest keys (MaxKeySize zero
// bytes, escaped to twice that) that one rewrite deletes or folds must fit
// in one Badger transaction, or GC fails at that key on every pass, and
// leaves every key after it alone too.
func TestGCLargeKeys(t *testing.T) {
	e := newEnv(t, true)
	s := e.store(t)
	big := string(make([]byte, flowlet.MaxKeySize))
	const versions = 200
	for i := range versions {
		st := e.begin(t, s)
		st.put("t", big, fmt.Sprint(i))
		st.add("c", big, 1)
		st.put("t", "z", fmt.Sprint(i)) // after big in key order
		st.commit()
	}
	wm := NewWatermark(e.coord)
	stats, err := s.GC(wm.Advance(), nil)
	if err != nil {
		t.Fatalf("GC: %v (%+v)", err, stats)
	}
	if k := countKeys(t, e.db); k != 3 {
		t.Fatalf("%d versions left, want 3 (%+v)", k, stats)
	}
	st := e.begin(t, s)
	defer st.abort()
	if v, n, z := st.get("t", big), st.count("c", big), st.get("t", "z"); v != fmt.Sprint(versions-1) || n != versions || z != v {
		t.Fatalf("after GC: %s %d %s", v, n, z)
	}
}

// TestGCCutBetweenCommits: a pass that fails (or the process dies) between
// two of its Badger transactions leaves reads as they were, wherever it is
// cut: the deltas a fold sums are never deleted before its base lands
// (counted zero; fails with the fold's deletions committed first), and a
// table's delete goes last (fails with it first). Small transactions cut a
// key's rewrite in many; the next pass finishes the job.
func TestGCCutBetweenCommits(t *testing.T) {
	fill := func(e *env) *Store {
		s := e.store(t)
		for i := range 150 {
			st := e.begin(t, s)
			st.add("c", "hot", int64(i%7-2))
			if i%3 == 0 {
				st.put("t", "gone", fmt.Sprint(i))
				st.put("t", "kept", fmt.Sprint(i))
			}
			switch {
			case i == 147: // the last put of "gone"
				st.del("t", "gone")
				st.commit()
			case i%11 == 5:
				invalidate(t, e, st) // its writes stay behind, invisible
			default:
				st.commit()
			}
		}
		return s
	}
	view := func(e *env) string {
		st := e.begin(t, e.store(t))
		defer st.abort()
		return fmt.Sprint(st.get("t", "gone"), " ", st.get("t", "kept"), " ", st.count("c", "hot"), " ",
			st.scan("t", flowlet.ScanOptions{}), st.scanCounters("c", flowlet.ScanOptions{}))
	}
	errCut := errors.New("cut")
	for cut := 1; ; cut++ {
		e := newEnv(t, false)
		s := fill(e)
		before := view(e)
		bound := NewWatermark(e.coord).Advance()
		g := newGCBatch(e.db)
		g.maxBytes = 1200 // about 15 versions a transaction
		commits := 0
		g.beforeCommit = func() error {
			if commits++; commits == cut {
				return errCut
			}
			return nil
		}
		_, err := s.gc(g, bound, e.coord.InvalidList())
		if err == nil {
			if cut < 10 {
				t.Fatalf("a pass took %d transactions, want several", commits)
			}
			t.Logf("cut at each of %d commits", cut-1)
			break
		}
		if !errors.Is(err, errCut) {
			t.Fatal(err)
		}
		if got := view(e); got != before {
			t.Fatalf("cut before commit %d: reads changed:\nbefore %s\nafter  %s", cut, before, got)
		}
		if _, err := s.GC(bound, e.coord.InvalidList()); err != nil {
			t.Fatal(err)
		}
		if got := view(e); got != before {
			t.Fatalf("cut before commit %d, then a pass: reads changed:\nbefore %s\nafter  %s", cut, before, got)
		}
		if k := countKeys(t, e.db); k != 2 { // "kept" and the base of "hot"
			t.Fatalf("cut before commit %d, then a pass: %d versions left, want 2", cut, k)
		}
		e.close()
	}
}

// TestGCInterleavedCutPasses: GC passes cut before any of their commits,
// with another pass (at an older bound, cut too) run in the middle of one:
// two passes interleaved, one writing from a snapshot the other has
// changed since; and a step in progress during a pass (its versions
// stored, on the persist path) commits in the middle of it. Steps and
// passes at newer bounds follow, on keys whose versions span many of the
// passes' small transactions. Before every commit of a pass and after it,
// a step reads what it read before the pass; so do transactions that
// started before passes and read only in the middle of a later one or
// after it. It fails when a fold sums past the newest base (the next pass
// after a cut one counts the deltas the base covers twice), when a base
// lands after the deletions it covers, when a table's newest delete goes
// before the versions it shadows, or when an invalid delta is summed.
func TestGCInterleavedCutPasses(t *testing.T) {
	errCut := errors.New("cut")
	const keys = 4
	for seed := range uint64(12) {
		e := newEnv(t, seed%2 == 0)
		s := e.store(t)
		rng := rand.New(rand.NewPCG(seed, 3))
		// pass runs a pass, cut before its commit number cut (never if
		// 0), in transactions of about 3 to 20 versions; each runs
		// before each of its commits.
		pass := func(bound uint64, cut int, each func()) {
			t.Helper()
			g := newGCBatch(e.db)
			g.maxBytes = 200 + rng.IntN(1300)
			commits := 0
			g.beforeCommit = func() error {
				if each != nil {
					each()
				}
				if commits++; commits == cut {
					return errCut
				}
				return nil
			}
			if _, err := s.gc(g, bound, e.coord.InvalidList()); err != nil && !errors.Is(err, errCut) {
				t.Fatal(err)
			}
		}
		type reader struct {
			st   *step
			want string
		}
		var readers []reader
		read := func(r reader, when string) {
			t.Helper()
			if got := r.st.dump(keys); got != r.want {
				t.Fatalf("seed %d, %s: a transaction older than passes read\n%s\nwant\n%s", seed, when, got, r.want)
			}
			r.st.abort()
		}
		wm := NewWatermark(e.coord)
		var bounds []uint64 // each stays safe
		for round := range 25 {
			for range rng.IntN(20) {
				randomStep(t, e, s, rng, keys, fmt.Sprint(round))
			}
			if rng.IntN(3) == 0 {
				readers = append(readers, reader{e.begin(t, e.store(t)), e.dump(t, keys)})
			}
			var writer *step // in progress during the pass
			if rng.IntN(3) == 0 {
				writer = e.begin(t, e.store(t))
				writer.randomWrites(rng, keys, fmt.Sprint("w", round))
				if !e.fast { // its versions in the store, uncommitted
					if err := writer.s.Persist(); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := e.dump(t, keys)
			bounds = append(bounds, wm.Advance())
			bound := bounds[len(bounds)-1]
			if rng.IntN(4) == 0 {
				bound = bounds[rng.IntN(len(bounds))]
			}
			nest, commits := 1+rng.IntN(12), 0
			check := func() {
				t.Helper()
				if got := e.dump(t, keys); got != want {
					t.Fatalf("seed %d, round %d, after %d commits of a pass at %d: read\n%s\nwant\n%s", seed, round, commits, bound, got, want)
				}
			}
			commitWriter := func() {
				if writer != nil {
					writer.commit()
					writer, want = nil, e.dump(t, keys)
				}
			}
			pass(bound, rng.IntN(15), func() {
				check()
				if len(readers) > 0 && rng.IntN(8) == 0 {
					read(readers[0], fmt.Sprint("round ", round, ", mid-pass"))
					readers = readers[1:]
				}
				if commits++; commits == nest {
					pass(bounds[rng.IntN(len(bounds))], rng.IntN(10), check)
					commitWriter() // between two commits of the pass
				}
			})
			check()
			commitWriter()
			if len(readers) > 0 && rng.IntN(2) == 0 {
				read(readers[0], fmt.Sprint("round ", round))
				readers = readers[1:]
			}
		}
		for _, r := range readers {
			read(r, "at the end")
		}
		e.close()
	}
}

// settledVersions stores n committed versions of key: in counter table c
// the deltas 1, 2, …, n, in table t the values "1", "2", …, "n". They are
// written straight to Badger under the write pointers of n empty steps: a
// step each with its writes would take long.
func settledVersions(t *testing.T, e *env, key string, n int) {
	t.Helper()
	s := e.store(t)
	wb := e.db.NewWriteBatch()
	defer wb.Cancel()
	for i := range n {
		st := e.begin(t, s)
		wp := st.ctx.Tx().WritePointer
		st.commit()
		for k, v := range map[string][]byte{
			string(s.Counters("c").versionKey([]byte(key), wp)): encodeCount(tagDelta, int64(i+1)),
			string(s.Table("t").versionKey([]byte(key), wp)):    append([]byte{tagValue}, fmt.Sprint(i+1)...),
		} {
			if err := wb.Set([]byte(k), v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
}

// liveHeap is the heap in use after a collection: what is held, not what
// went through. The second collection frees what the first left in
// sync.Pools' victim caches (Badger's pooled iterator items and buffers:
// ~1 MiB after a read, which made a base taken then look higher than it
// is).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestGCFoldBoundedMemory: a pass folds a counter's many deltas below the
// bound, and deletes a table key's many versions, without holding them all: the heap it holds at each of its Badger
// commits stays within a few of its transactions, whatever the number of
// versions. It held every version of the key below the bound at once (82
// MiB of a run's heap for 50 000 deltas).
func TestGCFoldBoundedMemory(t *testing.T) {
	// A memtable that holds the whole test: Badger allocates each one
	// whole, and one more during the pass would count as held. Badger's
	// conflict detection off, as in the runtime's store: with it on,
	// Badger keeps every commit's key hashes while an older read is open
	// (the pass's own: tens of KiB a commit of the pass), and frees those
	// of the commits before (settledVersions': a few MiB) only when its
	// watermark of reads catches up: the figure was anything from below
	// zero to 3 MiB from run to run.
	e := &env{dir: t.TempDir(), memTable: 48 << 20, badgerOpts: func(o badger.Options) badger.Options {
		return o.WithDetectConflicts(false)
	}}
	e.open(t)
	t.Cleanup(func() { e.close() })
	const n = 50000
	settledVersions(t, e, "hot", n)
	s := e.store(t)
	read := func() string {
		st := e.begin(t, s)
		defer st.abort()
		return fmt.Sprint(st.count("c", "hot"), " ", st.get("t", "hot"))
	}
	want := fmt.Sprint(n*(n+1)/2, " ", n)
	if got := read(); got != want {
		t.Fatalf("before GC: hot = %s, want %s", got, want)
	}
	g := newGCBatch(e.db)
	base := liveHeap()
	var held uint64
	commits := 0
	g.beforeCommit = func() error {
		commits++
		if h := liveHeap(); h > base {
			held = max(held, h-base)
		}
		return nil
	}
	stats, err := s.gc(g, NewWatermark(e.coord).Advance(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d commits, at most %d KiB held (%+v)", commits, held>>10, stats)
	// One Badger transaction of the pass (gcOpsPerTxn deletes) and the
	// iterator: about 220 KiB; all versions at once were 6.7 MiB.
	const limit = 2 << 20
	if held > limit {
		t.Fatalf("a pass held %d KiB at a commit over %d versions, want at most %d KiB", held>>10, n, limit>>10)
	}
	if got := read(); got != want {
		t.Fatalf("after GC: hot = %s, want %s (%+v)", got, want, stats)
	}
	if k := countKeys(t, e.db); k != 2 {
		t.Fatalf("%d versions left, want 2 (%+v)", k, stats)
	}
}

// stored renders the stored versions of the state whose rendering has sub
// in it, keys and values.
func stored(t *testing.T, db *badger.DB, sub string) string {
	t.Helper()
	var b strings.Builder
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(Prefix)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if l := fmt.Sprintf("%q=%q\n", it.Item().Key(), v); strings.Contains(l, sub) {
				b.WriteString(l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGCDamaged: a stored value that does not decode (a counter's, the
// newest, a middle or the oldest of its versions, or the newest of a table
// key's) is left as it is, and every GC pass goes on past it with the other
// keys and reports it; reads of it fail with an error naming it. An empty
// value is what Badger hands out, without an error, for a value that fails
// its checksum (TestDamagedValueLog). The first pass failed at a damaged
// counter and collected nothing after it, for good, and reads failed with
// "malformed counter value", naming nothing; a damaged table value read
// as no value.
func TestGCDamaged(t *testing.T) {
	getC := func(s *Store) error { _, err := s.Counters("c").Get([]byte("hot")); return err }
	scanC := func(s *Store) flowlet.Iterator { return counterScan{s.Counters("c").Scan(flowlet.ScanOptions{})} }
	getT := func(s *Store) error { _, _, err := s.Table("t").Get([]byte("hot")); return err }
	scanT := func(s *Store) flowlet.Iterator { return s.Table("t").Scan(flowlet.ScanOptions{}) }
	for _, c := range []struct {
		kind, name string
		nth        int    // which version of key "hot", newest first
		junk       string // its damaged value
		get        func(s *Store) error
		scan       func(s *Store) flowlet.Iterator
	}{
		{"counters", "c", 1, "junk", getC, scanC},
		{"counters", "c", 0, "", getC, scanC},
		{"counters", "c", 2, "b\x01", getC, scanC},
		{"table", "t", 0, "\x07x", getT, scanT},
		{"table", "t", 0, "", getT, scanT},
	} {
		t.Run(fmt.Sprintf("%s/%d/%q", c.kind, c.nth, c.junk), func(t *testing.T) {
			testGCDamaged(t, c.kind, c.name, c.nth, c.junk, c.get, c.scan)
		})
	}
}

// counterScan shows a counter iterator's counts as values.
type counterScan struct{ flowlet.CounterIterator }

func (c counterScan) Value() []byte { return []byte(fmt.Sprint(c.Count())) }

func testGCDamaged(t *testing.T, kind, name string, nth int, junk string,
	get func(*Store) error, scan func(*Store) flowlet.Iterator) {
	e := newEnv(t, true)
	s := e.store(t)
	for i := range 3 {
		st := e.begin(t, s)
		for _, k := range []string{"a", "hot", "z"} {
			st.add("c", k, int64(i+1))
			st.put("t", k, fmt.Sprint(i+1))
		}
		st.commit()
	}
	var sp *space
	if kind == "table" {
		sp = &s.Table(name).space
	} else {
		sp = &s.Counters(name).space
	}
	var wp uint64
	err := e.db.Update(func(txn *badger.Txn) error {
		k := sp.versionKey([]byte("hot"), 0)
		k = k[:len(k)-versionLen]
		it := txn.NewIterator(badger.IteratorOptions{Prefix: k})
		defer it.Close()
		it.Rewind()
		for range nth {
			it.Next()
		}
		wp = ^beUint64(it.Item().Key()[len(k):])
		return txn.Set(it.Item().KeyCopy(nil), []byte(junk))
	})
	if err != nil {
		t.Fatal(err)
	}
	damagedHot := func(what string, err error) {
		t.Helper()
		var de *DamagedError
		if !errors.As(err, &de) || !errors.Is(err, ErrDamaged) {
			t.Fatalf("%s: %v, want a DamagedError", what, err)
		}
		if de.Kind != kind || de.Name != name || string(de.Key) != "hot" || de.Version != wp {
			t.Fatalf("%s: %+v, want %s %s key hot version %d", what, de, kind, name, wp)
		}
	}
	hot := fmt.Sprintf("%q", sp.prefix) // what stored renders of sp's versions of hot
	hot = hot[1:len(hot)-1] + `hot`
	before := stored(t, e.db, hot)
	wm := NewWatermark(e.coord)
	for pass := range 2 {
		stats, err := s.GC(wm.Advance(), nil)
		damagedHot(fmt.Sprint("GC pass ", pass), err)
		if stats.Damaged != 1 || stats.Keys != 6 {
			t.Fatalf("pass %d: %+v, want 6 keys, 1 damaged", pass, stats)
		}
	}
	if after := stored(t, e.db, hot); strings.Count(before, "\n") != 3 || after != before {
		t.Fatalf("GC changed the damaged key:\nbefore %s\nafter  %s", before, after)
	}
	if k := countKeys(t, e.db); k != 5+3 {
		t.Fatalf("%d versions left, want one of each key but the damaged one, its 3 kept:\n%s", k, stored(t, e.db, ""))
	}

	st := e.begin(t, s)
	defer st.abort()
	damagedHot("Get", get(s))
	it := scan(s)
	defer it.Close()
	for it.Next() {
		if string(it.Key()) != "a" || string(it.Value()) != map[string]string{"table": "3", "counters": "6"}[kind] {
			t.Fatalf("scan: %q=%q, want a then an error", it.Key(), it.Value())
		}
	}
	damagedHot("Scan", it.Err())
	if a, z, ca, cz := st.get("t", "a"), st.get("t", "z"), st.count("c", "a"), st.count("c", "z"); a != "3" || z != "3" || ca != 6 || cz != 6 {
		t.Fatalf("a=%s z=%s, counters a=%d z=%d, want 3 3 6 6", a, z, ca, cz)
	}
}

// TestGCClosedDBMidPass: a pass under way when the DB closes (a pass
// racing the app's shutdown) ends with an error wrapping
// badger.ErrDBClosed. It went on reading Badger's tables, unmapped by the
// close, and killed the process (SIGSEGV).
func TestGCClosedDBMidPass(t *testing.T) {
	e := newEnv(t, true)
	for range 2 {
		fillKeys(t, e, e.store(t), 1000)
	}
	e.reopen(t) // the versions are in Badger's tables, not its memtable
	s := e.store(t)
	g := newGCBatch(e.db)
	g.maxBytes = 2000 // many commits
	g.afterCommit = func() {
		if err := e.db.Close(); err != nil {
			t.Error(err)
		}
	}
	if _, err := s.gc(g, NewWatermark(e.coord).Advance(), nil); !errors.Is(err, badger.ErrDBClosed) {
		t.Fatalf("GC: %v, want ErrDBClosed", err)
	}
}

// TestDamagedValueLog: with the value log options the runtime opens its
// store with (values over 1 KiB in Badger's value log, checked against
// their checksum as they are read), a table value damaged on disk reads as
// a DamagedError naming it, and GC keeps that key's versions, collects the
// other keys and reports it. Badger hands such a value out as empty,
// without an error (it only logs one), and empty is no table value: read
// as a delete, the key would be silently gone.
func TestDamagedValueLog(t *testing.T) {
	e := &env{dir: t.TempDir(), fast: true, badgerOpts: func(o badger.Options) badger.Options {
		return o.WithValueThreshold(1 << 10).WithVerifyValueChecksum(true)
	}}
	e.open(t)
	t.Cleanup(func() { e.close() })
	value := func(k string, i int) string { return fmt.Sprint(i, strings.Repeat(k, 2000)) }
	s := e.store(t)
	var wp uint64 // of hot's newest version
	for i := range 3 {
		st := e.begin(t, s)
		for _, k := range []string{"a", "hot", "z"} {
			st.put("t", k, value(k, i))
		}
		wp = st.ctx.Tx().WritePointer
		st.commit()
	}
	// Damage in the newest value log file would cut it there when Badger
	// opens it, silently, and every value after the damage, of any key,
	// would read as empty (damaged too). A reopen starts a new one.
	e.reopen(t)
	if err := e.close(); err != nil {
		t.Fatal(err)
	}
	logs, err := filepath.Glob(filepath.Join(e.dir, "*.vlog"))
	if err != nil {
		t.Fatal(err)
	}
	damaged := 0
	for _, name := range logs {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(b, []byte(value("hot", 2))); i >= 0 {
			b[i+100] ^= 0xFF
			damaged++
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if damaged != 1 {
		t.Fatalf("hot's newest value found %d times in the value logs %v, want once", damaged, logs)
	}
	e.open(t)
	s = e.store(t)
	damagedHot := func(what string, err error) {
		t.Helper()
		var de *DamagedError
		if !errors.As(err, &de) || de.Kind != "table" || de.Name != "t" || string(de.Key) != "hot" || de.Version != wp {
			t.Fatalf("%s: %v, want a DamagedError of table t key hot version %d", what, err, wp)
		}
	}
	st := e.begin(t, s)
	_, _, err = s.Table("t").Get([]byte("hot"))
	damagedHot("Get", err)
	st.abort()
	stats, err := s.GC(NewWatermark(e.coord).Advance(), nil)
	damagedHot("GC", err)
	if stats.Damaged != 1 {
		t.Fatalf("GC: %+v, want 1 damaged", stats)
	}
	if k := countKeys(t, e.db); k != 1+3+1 {
		t.Fatalf("%d versions left, want a's and z's newest and hot's 3:\n%s", k, stored(t, e.db, ""))
	}
}
