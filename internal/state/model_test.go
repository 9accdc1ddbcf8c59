package state

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/tx"
)

// The model: snapshot isolation as a list of commits in commit order. A
// transaction sees the commits before its start plus its own writes; a
// table write conflicts with one of the same key committed since its start.

type modelKey struct{ name, key string }

type modelWrite struct {
	value string
	del   bool
}

type modelCommit struct {
	puts map[modelKey]modelWrite
	adds map[modelKey]int64 // non-zero sums only: what a commit stores
}

type modelTx struct {
	st   *step
	snap int // commits it sees: model.commits[:snap]
	puts map[modelKey]modelWrite
	adds map[modelKey]int64
}

type model struct{ commits []modelCommit }

func (m *model) get(x *modelTx, k modelKey) (string, bool) {
	if w, ok := x.puts[k]; ok {
		return w.value, !w.del
	}
	for i := x.snap - 1; i >= 0; i-- {
		if w, ok := m.commits[i].puts[k]; ok {
			return w.value, !w.del
		}
	}
	return "", false
}

// count returns the counter and whether it exists: some visible commit or
// the transaction itself added a non-zero sum to it.
func (m *model) count(x *modelTx, k modelKey) (int64, bool) {
	n, ok := x.adds[k]
	ok = ok && n != 0
	for _, c := range m.commits[:x.snap] {
		if d, in := c.adds[k]; in {
			n += d
			ok = true
		}
	}
	return n, ok
}

func (m *model) scan(x *modelTx, name string, o flowlet.ScanOptions) string {
	return m.scanWith(x, name, o, func(c modelCommit) []modelKey { return slices.Collect(maps.Keys(c.puts)) },
		func(k modelKey) (string, bool) {
			v, ok := m.get(x, k)
			return fmt.Sprintf("%q", v), ok
		})
}

func (m *model) scanCounters(x *modelTx, name string, o flowlet.ScanOptions) string {
	return m.scanWith(x, name, o, func(c modelCommit) []modelKey { return slices.Collect(maps.Keys(c.adds)) },
		func(k modelKey) (string, bool) {
			n, ok := m.count(x, k)
			return fmt.Sprint(n), ok
		})
}

// scanWith renders the keys of name that o selects among those that keysOf
// lists in the visible commits and x's own writes, with their values.
func (m *model) scanWith(x *modelTx, name string, o flowlet.ScanOptions,
	keysOf func(modelCommit) []modelKey, value func(modelKey) (string, bool)) string {
	var keys []string
	for _, c := range append(slices.Clip(m.commits[:x.snap]), modelCommit{puts: x.puts, adds: x.adds}) {
		for _, k := range keysOf(c) {
			if k.name == name {
				keys = append(keys, k.key)
			}
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	n := 0
	for _, k := range slices.Compact(keys) {
		v, ok := value(modelKey{name, k})
		if !ok || !o.Match([]byte(k)) || (o.Limit > 0 && n >= o.Limit) {
			continue
		}
		n++
		fmt.Fprintf(&b, "%q=%s ", k, v)
	}
	return b.String()
}

// conflicts reports whether a commit since x started wrote one of x's table keys.
func (m *model) conflicts(x *modelTx) bool {
	for _, c := range m.commits[x.snap:] {
		for k := range x.puts {
			if _, ok := c.puts[k]; ok {
				return true
			}
		}
	}
	return false
}

func (m *model) commit(x *modelTx) {
	c := modelCommit{puts: x.puts, adds: map[modelKey]int64{}}
	for k, d := range x.adds {
		if d != 0 {
			c.adds[k] = d
		}
	}
	m.commits = append(m.commits, c)
}

// Keys with the bytes the encoding escapes (0x00), the empty key, keys
// that are prefixes of others, and the largest key, which escapes to twice
// its size.
var modelKeys = []string{"", "a", "a\x00", "a\x00b", "a\x00\x01", "ab", "a\xff", "b", "\x00", "\xff", "\x00\xff",
	strings.Repeat("\x00", flowlet.MaxKeySize)}

func randomScan(rng *rand.Rand) flowlet.ScanOptions {
	pick := func() []byte {
		if rng.IntN(2) == 0 {
			return nil
		}
		return []byte(modelKeys[rng.IntN(len(modelKeys))])
	}
	o := flowlet.ScanOptions{Start: pick(), End: pick(), Limit: rng.IntN(4)}
	if rng.IntN(2) == 0 {
		o.Prefix = pick()
	}
	return o
}

// TestModel runs random interleaved steps on several stores — puts,
// deletes, counter adds, reads and scans, checkpoints, commits (with
// conflicts), aborts, invalidations, GC passes and (on the fast path)
// reopening the DB — and checks every read and every commit's outcome
// against the model.
func TestModel(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			bothPaths(t, func(t *testing.T, e *env) { runModel(t, e, seed, 1500) })
		})
	}
}

func runModel(t *testing.T, e *env, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	m := &model{}
	const maxOpen = 3
	var open []*modelTx
	var stats struct{ conflicts, aborts, invalid, gcs, gcDeleted, reopens int }
	defer func() { t.Logf("%d commits, %+v", len(m.commits), stats) }()
	idle := []*Store{e.store(t), e.store(t), e.store(t)}
	wm := NewWatermark(e.coord)
	stopGC := gcBehind(t, e, wm)
	names := []string{"t", "u"} // "t" names a table and a counter table
	counters := []string{"t", "c"}
	key := func() string { return modelKeys[rng.IntN(len(modelKeys))] }
	end := func(i int) {
		idle = append(idle, open[i].st.s)
		open = slices.Delete(open, i, i+1)
	}
	for i := range steps {
		if len(open) < maxOpen && (len(open) == 0 || rng.IntN(4) == 0) {
			s := idle[len(idle)-1]
			idle = idle[:len(idle)-1]
			open = append(open, &modelTx{st: e.begin(t, s), snap: len(m.commits),
				puts: map[modelKey]modelWrite{}, adds: map[modelKey]int64{}})
			continue
		}
		stopGC.kick()
		xi := rng.IntN(len(open))
		x := open[xi]
		s := x.st.s
		what := fmt.Sprintf("step %d, tx %d", i, x.st.ctx.Tx().ID)
		switch r := rng.IntN(100); {
		case r < 15:
			k := modelKey{names[rng.IntN(2)], key()}
			v := fmt.Sprint(i)
			x.st.put(k.name, k.key, v)
			x.puts[k] = modelWrite{value: v}
		case r < 22:
			k := modelKey{names[rng.IntN(2)], key()}
			x.st.del(k.name, k.key)
			x.puts[k] = modelWrite{del: true}
		case r < 35:
			k := modelKey{counters[rng.IntN(2)], key()}
			d := int64(rng.IntN(7) - 3)
			x.st.add(k.name, k.key, d)
			x.adds[k] += d
		case r < 45:
			k := modelKey{names[rng.IntN(2)], key()}
			want, ok := m.get(x, k)
			if !ok {
				want = "<none>"
			}
			if got := x.st.get(k.name, k.key); got != want {
				t.Fatalf("%s: get %q: got %q, want %q", what, k, got, want)
			}
		case r < 52:
			k := modelKey{counters[rng.IntN(2)], key()}
			want, _ := m.count(x, k)
			if got := x.st.count(k.name, k.key); got != want {
				t.Fatalf("%s: count %q: got %d, want %d", what, k, got, want)
			}
		case r < 60:
			name, o := names[rng.IntN(2)], randomScan(rng)
			if got, want := x.st.scan(name, o), m.scan(x, name, o); got != want {
				t.Fatalf("%s: scan %s %+v:\n got %s\nwant %s", what, name, o, got, want)
			}
		case r < 66:
			name, o := counters[rng.IntN(2)], randomScan(rng)
			if got, want := x.st.scanCounters(name, o), m.scanCounters(x, name, o); got != want {
				t.Fatalf("%s: scan counters %s %+v:\n got %s\nwant %s", what, name, o, got, want)
			}
		case r < 68:
			if err := x.st.ctx.Checkpoint(); err != nil {
				t.Fatalf("%s: checkpoint: %v", what, err)
			}
		case r < 88:
			conflict := m.conflicts(x)
			err := x.st.ctx.Finish()
			switch {
			case conflict && !errors.Is(err, tx.ErrConflict):
				t.Fatalf("%s: commit: %v, want a conflict", what, err)
			case !conflict && err != nil:
				t.Fatalf("%s: commit: %v", what, err)
			case err == nil:
				m.commit(x)
			default:
				stats.conflicts++
			}
			end(xi)
		case r < 91:
			x.st.abort()
			stats.aborts++
			end(xi)
		case r < 94:
			invalidate(t, e, x.st)
			stats.invalid++
			end(xi)
		case r < 99:
			bound := wm.Advance()
			gs, err := s.GC(bound, e.coord.InvalidList())
			if err != nil {
				t.Fatalf("%s: GC(%d): %v", what, bound, err)
			}
			stats.gcs++
			stats.gcDeleted += gs.Deleted
		default:
			if !e.fast {
				continue
			}
			for len(open) > 0 {
				open[0].st.abort()
				end(0)
			}
			stats.gcs += stopGC.stop()
			e.reopen(t)
			stats.reopens++
			idle = []*Store{e.store(t), e.store(t), e.store(t)}
			wm = NewWatermark(e.coord)
			stopGC = gcBehind(t, e, wm)
		}
	}
	for len(open) > 0 {
		open[0].st.abort()
		end(0)
	}
	stats.gcs += stopGC.stop()
	// With nothing in progress, GC leaves no version of an invalid
	// transaction behind, nor any it shadows, and the results stand.
	x := &modelTx{st: e.begin(t, idle[0]), snap: len(m.commits)}
	before := dumpModelView(x.st, names, counters)
	x.st.abort()
	for range 2 {
		if _, err := idle[0].GC(wm.Advance(), e.coord.InvalidList()); err != nil {
			t.Fatal(err)
		}
	}
	if left := garbage(t, e); len(left) > 0 {
		t.Fatalf("after GC, garbage remains: %v", left)
	}
	x.st = e.begin(t, idle[0])
	defer x.st.abort()
	if after := dumpModelView(x.st, names, counters); after != before {
		t.Fatalf("GC changed results:\nbefore %s\nafter  %s", before, after)
	}
	if got, want := dumpModelView(x.st, names, counters), dumpModel(m, x, names, counters); got != want {
		t.Fatalf("final state:\n got %s\nwant %s", got, want)
	}
}

// backgroundGC runs GC passes on a Store of its own while the steps go on,
// as the runtime's maintenance does: one pass after each kick.
type backgroundGC struct {
	t      *testing.T
	kicks  chan struct{}
	passes chan int
	err    chan error
	halt   sync.Once
	n      int
}

// gcBehind starts a backgroundGC. A test that fails stops it before its
// DB closes: a pass on the closed DB panicked, hiding the failure.
func gcBehind(t *testing.T, e *env, wm *Watermark) *backgroundGC {
	s := e.store(t)
	g := &backgroundGC{t: t, kicks: make(chan struct{}, 1), passes: make(chan int, 1), err: make(chan error, 1)}
	t.Cleanup(func() { g.wait() })
	go func() {
		n := 0
		defer func() { g.passes <- n }()
		for range g.kicks {
			if _, err := s.GC(wm.Advance(), e.coord.InvalidList()); err != nil {
				g.err <- err
				return
			}
			n++
		}
	}()
	return g
}

// kick asks for a pass unless one is asked for already.
func (g *backgroundGC) kick() {
	select {
	case g.kicks <- struct{}{}:
	default:
	}
}

// stop waits for the pass under way and returns how many ran.
func (g *backgroundGC) stop() int {
	g.wait()
	select {
	case err := <-g.err:
		g.t.Fatalf("background GC: %v", err)
	default:
	}
	return g.n
}

// wait ends the passes and waits for the one under way, once.
func (g *backgroundGC) wait() {
	g.halt.Do(func() {
		close(g.kicks)
		g.n = <-g.passes
	})
}

// invalidate ends st's transaction as invalid. On the persist path its
// writes are persisted first and stay behind, as after a failed rollback;
// on the fast path nothing of it was written (a timeout, say) and its
// commit must fail.
func invalidate(t *testing.T, e *env, st *step) {
	t.Helper()
	if !e.fast {
		if err := st.s.Persist(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.coord.Invalidate(st.ctx.Tx()); err != nil {
		t.Fatal(err)
	}
	if e.fast {
		if err := st.ctx.Finish(); !errors.Is(err, tx.ErrNotInProgress) {
			t.Fatalf("commit of an invalidated transaction: %v", err)
		}
		return
	}
	st.s.PostCommit() // the Store forgets it; its Context is dropped
}

func dumpModelView(st *step, names, counters []string) string {
	var b strings.Builder
	for _, n := range names {
		b.WriteString(st.scan(n, flowlet.ScanOptions{}) + "|")
	}
	for _, n := range counters {
		b.WriteString(st.scanCounters(n, flowlet.ScanOptions{}) + "|")
	}
	return b.String()
}

func dumpModel(m *model, x *modelTx, names, counters []string) string {
	var b strings.Builder
	for _, n := range names {
		b.WriteString(m.scan(x, n, flowlet.ScanOptions{}) + "|")
	}
	for _, n := range counters {
		b.WriteString(m.scanCounters(x, n, flowlet.ScanOptions{}) + "|")
	}
	return b.String()
}

// garbage lists the stored state versions that a GC with nothing in
// progress leaves none of: versions of a transaction in the coordinator's
// invalid list, all but one version of a key, a table's delete.
func garbage(t *testing.T, e *env) []string {
	t.Helper()
	invalid := e.coord.InvalidList()
	var left []string
	var prev []byte
	err := e.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(Prefix), PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			wp := ^beUint64(k[len(k)-versionLen:])
			if _, bad := slices.BinarySearch(invalid, wp); bad {
				left = append(left, fmt.Sprintf("%q of invalid %d", k, wp))
			}
			if bytes.Equal(encodedUserKey(k), prev) {
				left = append(left, fmt.Sprintf("%q: an older version", k))
			}
			prev = append(prev[:0], encodedUserKey(k)...)
			if err := it.Item().Value(func(v []byte) error {
				if len(v) == 1 && v[0] == tagTombstone {
					left = append(left, fmt.Sprintf("%q: a table delete", k))
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}
