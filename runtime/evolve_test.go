package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/runtime"
)

// Editing an app between runs on one store: what the stored data cannot
// follow is refused before anything changes, and what it can is applied.

// fillBacklog runs the app with the named flowlets paused until every
// source has ended, so that their input queues keep what was produced.
func fillBacklog(t *testing.T, dir, yaml string, paused ...string) {
	t.Helper()
	a, err := runtime.Open(plan(t, dir, yaml), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, f := range paused {
		if err := a.Pause(f); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for !sourcesEnded(a) {
		if time.Now().After(deadline) {
			t.Fatal("sources did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func sourcesEnded(a *runtime.App) bool {
	for _, f := range a.Status().Flowlets {
		if f.Source && f.Done < f.Instances {
			return false
		}
	}
	return true
}

func openErr(t *testing.T, dir, yaml string) error {
	t.Helper()
	a, err := runtime.Open(plan(t, dir, yaml), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if err == nil {
		a.Close()
	}
	return err
}

// A hash connection's key cannot change under events partitioned by the old
// one (their per-key order would be lost); the refusal changes nothing, and
// once they are consumed the change is applied.
func TestKeyChangeRefusedUnderBacklog(t *testing.T) {
	dir := t.TempDir()
	app := func(key string) string {
		return `app: keys
flowlets:
  gen: {type: generator, config: {count: 300, keys: {k: "k{mod:7}", j: "j{mod:3}"}}}
  c: {type: t_count}
connections:
  - {from: gen, to: c, strategy: hash, key: ` + key + `}
`
	}
	fillBacklog(t, dir, app("k"), "c")
	err := openErr(t, dir, app("j"))
	if err == nil || !strings.Contains(err.Error(), `queue gen.out holds 300 events not consumed yet that were partitioned by the key "k", and the app now partitions it by the key "j"`) {
		t.Fatalf("key change under a backlog: %v", err)
	}
	// Nothing changed: the app as it was consumes everything once.
	a := runDrain(t, dir, app("k"), runtime.Options{NoSync: true})
	if n := counter(t, a, "c", "n", "total"); n != 300 {
		t.Fatalf("after the refused change: %d events consumed, want 300", n)
	}
	a.Close()
	// Drained, the key may change.
	if err := openErr(t, dir, app("j")); err != nil {
		t.Fatalf("key change on a drained queue: %v", err)
	}

	// A queue first read without a key gets the same protection: a hash
	// group added to it cannot keep the order of what is stored.
	dir = t.TempDir()
	plain := strings.Replace(app("k"), "strategy: hash, key: k", "strategy: round_robin", 1)
	withHash := strings.Replace(plain, "  c: {type: t_count}\n", "  c: {type: t_count}\n  h: {type: t_count}\n", 1) +
		"  - {from: gen, to: h, strategy: hash, key: k}\n"
	fillBacklog(t, dir, plain, "c")
	err = openErr(t, dir, withHash)
	if err == nil || !strings.Contains(err.Error(), `partitioned by no key (spread over the partitions), and the app now partitions it by the key "k"`) {
		t.Fatalf("a hash group added under an unkeyed backlog: %v", err)
	}
}

// A start that is refused (here: a partition count change on one queue) has
// not removed another queue's group first: its backlog is all there.
func TestRefusedStartChangesNothing(t *testing.T) {
	dir := t.TempDir()
	v1 := `app: refuse
flowlets:
  g1: {type: generator, config: {count: 200}}
  g2: {type: generator, config: {count: 10}}
  a: {type: t_count}
  c: {type: t_count}
  b: {type: t_count}
connections:
  - {from: g1, to: a}
  - {from: g1, to: c}
  - {from: g2, to: b}
`
	fillBacklog(t, dir, v1, "a")
	// a goes (its group on g1.out would be removed), and g2.out's
	// partition count changes, which is refused.
	v2 := strings.Replace(strings.Replace(v1, "  - {from: g1, to: a}\n", "", 1), "  a: {type: t_count}\n", "", 1)
	v2 = strings.Replace(v2, "{from: g2, to: b}", "{from: g2, to: b, partitions: 16}", 1)
	err := openErr(t, dir, v2)
	if err == nil || !strings.Contains(err.Error(), "queue g2.out has 64 partitions and the app now asks for 16") {
		t.Fatalf("partition count change: %v", err)
	}
	a := runDrain(t, dir, v1, runtime.Options{NoSync: true})
	defer a.Close()
	if n := counter(t, a, "a", "n", "total"); n != 200 {
		t.Fatalf("a consumed %d events after the refused start, want all 200", n)
	}
}

// A store holds one app: a renamed app would start its sources over on
// queues that still hold the old app's events. Stores from before the
// record are recognised by their flowlet state.
func TestStoreBelongsToOneApp(t *testing.T) {
	dir := t.TempDir()
	app := func(name string) string {
		return "app: " + name + `
flowlets:
  gen: {type: generator, config: {count: 20}}
  c: {type: t_count}
connections:
  - {from: gen, to: c}
`
	}
	runDrain(t, dir, app("shop"), runtime.Options{NoSync: true}).Close()
	err := openErr(t, dir, app("shop-v2"))
	if !errors.Is(err, runtime.ErrOtherApp) || !strings.Contains(err.Error(), `holds the state and queues of app "shop", and this app is "shop-v2"`) {
		t.Fatalf("renamed app: %v", err)
	}
	// Reads (Store.CheckApp) refuse the stores a run refuses, no others.
	wantRead(t, dir, map[string]bool{"shop": true, "shop-v2": false})
	// A store written before the record: its state names the app.
	setAppRecord(t, dir, "")
	wantRead(t, dir, map[string]bool{"shop": true, "shop-v2": false})
	if err := openErr(t, dir, app("shop-v2")); !errors.Is(err, runtime.ErrOtherApp) {
		t.Fatalf("renamed app on a store without the record: %v", err)
	}
	if err := openErr(t, dir, app("shop")); err != nil {
		t.Fatalf("the app itself on a store without the record: %v", err)
	}

	// An older version let a renamed app run on the same store: both names
	// have state, and either may go on (a review finding: the one that ran
	// last was refused).
	dir = t.TempDir()
	runDrain(t, dir, app("one"), runtime.Options{NoSync: true}).Close()
	setAppRecord(t, dir, "two") // as if an older version had let "two" run on
	runDrain(t, dir, app("two"), runtime.Options{NoSync: true}).Close()
	setAppRecord(t, dir, "")
	wantRead(t, dir, map[string]bool{"one": true, "two": true, "three": false})
	for _, name := range []string{"two", "one"} {
		if err := openErr(t, dir, app(name)); err != nil {
			t.Errorf("%s, which has state in a store from before the record: %v", name, err)
		}
		setAppRecord(t, dir, "")
	}
	if err := openErr(t, dir, app("three")); !errors.Is(err, runtime.ErrOtherApp) {
		t.Errorf("an app without state there: %v", err)
	}
}

// wantRead checks which app names Store.CheckApp lets read the store at
// dir/data (true) and which it refuses as another app's (false).
func wantRead(t *testing.T, dir string, apps map[string]bool) {
	t.Helper()
	s, err := runtime.OpenStore(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, ok := range apps {
		if err := s.CheckApp(name); (err == nil) != ok || (err != nil && !errors.Is(err, runtime.ErrOtherApp)) {
			t.Errorf("CheckApp(%q): %v, want read allowed %v", name, err, ok)
		}
	}
}

// setAppRecord rewrites (or, with "", deletes) the app name a store records.
func setAppRecord(t *testing.T, dir, name string) {
	t.Helper()
	setStoreRecord(t, dir, "\x01app/name", name)
}

// setStoreRecord rewrites (or, with "", deletes) one of the runtime's
// records in the store at dir/data.
func setStoreRecord(t *testing.T, dir, key, val string) {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(dir, "data")).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(txn *badger.Txn) error {
		if val == "" {
			return txn.Delete([]byte(key))
		}
		return txn.Set([]byte(key), []byte(val))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A queue the app no longer has keeps its data and is named at start with
// what nobody reads any more; a removed group says what it drops.
func TestOrphanedBacklogIsReported(t *testing.T) {
	dir := t.TempDir()
	v1 := `app: orphan
flowlets:
  g1: {type: generator, config: {count: 50}}
  g2: {type: generator, config: {count: 5}}
  c: {type: t_count}
  d: {type: t_count}
connections:
  - {from: g1, to: c}
  - {from: g2, to: c}
  - {from: g2, to: d}
`
	fillBacklog(t, dir, v1, "c", "d")
	v2 := strings.Replace(strings.Replace(v1, "  - {from: g1, to: c}\n", "", 1), "  g1: {type: generator, config: {count: 50}}\n", "", 1)
	v2 = strings.Replace(strings.Replace(v2, "  - {from: g2, to: d}\n", "", 1), "  d: {type: t_count}\n", "", 1)
	var logs syncBuffer
	a, err := runtime.Open(plan(t, dir, v2), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data"),
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	out := logs.String()
	for _, want := range []string{
		`msg="a queue no longer in the app holds events nobody will read" app=orphan queue=g1.out unconsumed=50 groups="c (50)"`,
		`msg="removing consumer group no longer in the app" app=orphan queue=g2.out group=d dropped_unconsumed=5`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A consumer renamed between runs (here after it consumed everything) does
// not get again what it consumed under its old name, however far eviction
// had got.
func TestRenamedConsumerStartsWhereItWas(t *testing.T) {
	dir := t.TempDir()
	app := func(consumer string) string {
		return `app: rename
flowlets:
  gen: {type: generator, config: {count: 3000}}
  ` + consumer + `: {type: t_count, batch_size: 7}
connections:
  - {from: gen, to: ` + consumer + `}
`
	}
	a := runDrain(t, dir, app("c"), runtime.Options{NoSync: true})
	if n := counter(t, a, "c", "n", "total"); n != 3000 {
		t.Fatalf("c counted %d, want 3000", n)
	}
	a.Close()
	a = runDrain(t, dir, app("d"), runtime.Options{NoSync: true})
	defer a.Close()
	if n := counter(t, a, "d", "n", "total"); n != 0 {
		t.Fatalf("the renamed consumer counted %d events its predecessor had consumed", n)
	}
}

// A group's strategy may change between runs, backlog and all (it only
// says which instance reads which partition); to hash under a backlog
// spread without the key it is refused by the key check.
func TestStrategyChangeAppliesOrIsRefused(t *testing.T) {
	dir := t.TempDir()
	app := func(conn string) string {
		return `app: strat
flowlets:
  gen: {type: generator, config: {count: 300, keys: {k: "k{mod:5}"}}}
  c: {type: t_count, instances: 2}
connections:
  - {from: gen, to: c, ` + conn + `}
`
	}
	fillBacklog(t, dir, app("strategy: round_robin"), "c")
	err := openErr(t, dir, app("strategy: hash, key: k"))
	if err == nil || !strings.Contains(err.Error(), `holds 300 events not consumed yet that were partitioned by no key`) {
		t.Fatalf("round_robin to hash under a keyless backlog: %v", err)
	}
	a := runDrain(t, dir, app("strategy: fifo"), runtime.Options{NoSync: true})
	defer a.Close()
	if n := counter(t, a, "c", "n", "total"); n != 300 {
		t.Fatalf("after round_robin to fifo: %d events counted, want 300", n)
	}
}

// Leaving hash for a strategy that needs no key order is applied under a
// backlog; a store from before the key record still guards a keyless
// backlog against a hash group (review findings).
func TestKeyCheckEdges(t *testing.T) {
	app := func(conn string) string {
		return `app: edges
flowlets:
  gen: {type: generator, config: {count: 300, keys: {k: "k{mod:5}"}}}
  c: {type: t_count, instances: 2}
connections:
  - {from: gen, to: c, ` + conn + `}
`
	}
	dir := t.TempDir()
	fillBacklog(t, dir, app("strategy: hash, key: k"), "c")
	a := runDrain(t, dir, app("strategy: fifo"), runtime.Options{NoSync: true})
	if n := counter(t, a, "c", "n", "total"); n != 300 {
		t.Fatalf("hash to fifo under a backlog: %d events counted, want 300", n)
	}
	a.Close()

	dir = t.TempDir()
	fillBacklog(t, dir, app("strategy: fifo"), "c")
	setStoreRecord(t, dir, "\x01app/key/gen.out", "") // as before the key record
	err := openErr(t, dir, app("strategy: hash, key: k"))
	if err == nil || !strings.Contains(err.Error(), "partitioned by no key") {
		t.Fatalf("fifo to hash on a store without the key record: %v", err)
	}
}
