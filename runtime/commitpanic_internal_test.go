package runtime

import (
	"context"
	"testing"

	"github.com/flowrun/flowrun/tx"
)

// panicParticipant panics once the transaction committed (PostCommit): a
// commit that panics, as a buggy participant or tx.Finish could.
type panicParticipant struct{}

func (panicParticipant) StartTx(*tx.Tx) error  { return nil }
func (panicParticipant) UpdateTx(*tx.Tx) error { return nil }
func (panicParticipant) ChangeKeys() [][]byte  { return [][]byte{[]byte("panic-participant")} }
func (panicParticipant) Persist() error        { return nil }
func (panicParticipant) PostCommit()           { panic("participant panics in its commit") }
func (panicParticipant) Rollback() error       { return nil }

// openBacklogApp opens (does not run) an app of a generator and a t_take
// sink.
func openBacklogApp(t *testing.T) *App {
	t.Helper()
	return openYAML(t, `
app: cpanic
flowlets:
  gen: {type: generator, config: {count: 10}}
  sink: {type: t_take}
connections:
  - {from: gen, to: sink}
`, Options{NoSync: true})
}

// mustPanic runs fn and fails the test unless it panicked.
func mustPanic(t *testing.T, what string, fn func()) {
	t.Helper()
	panicked := false
	func() {
		defer func() { panicked = recover() != nil }()
		fn()
	}()
	if !panicked {
		t.Fatalf("%s did not panic", what)
	}
}

// backlogLockFree fails the test if backlogMu is held (the next
// syncBacklogs would wait for good), and runs a sync.
func backlogLockFree(t *testing.T, a *App) {
	t.Helper()
	if !a.backlogMu.TryLock() {
		t.Fatal("backlogMu is still held after a commit panicked: the next syncBacklogs would hang the app")
	}
	a.backlogMu.Unlock()
	if err := a.syncBacklogs(); err != nil {
		t.Fatal(err)
	}
}

// TestCommitPanicReleasesBacklogLock: a step's commit that panics (here a
// participant's PostCommit) left backlogMu held shared — it was released
// on the return paths only — so the next syncBacklogs, which a throttled
// source runs every second, waited for good, and with it every commit
// after it.
func TestCommitPanicReleasesBacklogLock(t *testing.T) {
	a := openBacklogApp(t)
	in := a.byName["sink"].insts[0]
	in.txc = a.st.coord.NewContext(panicParticipant{})
	sc, err := in.start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	mustPanic(t, "the step's commit", func() { _, _ = in.finish(sc) })
	backlogLockFree(t, a)
}

// TestIngestCommitPanicReleasesBacklogLock: the same for Ingest's commit
// (it runs in an HTTP handler, whose panic net/http recovers: the app
// would go on with the lock held).
func TestIngestCommitPanicReleasesBacklogLock(t *testing.T) {
	a := openBacklogApp(t)
	mustPanic(t, "the commit", func() {
		_ = a.commitCounted(func() error { panic("commit panics") }, func() {})
	})
	backlogLockFree(t, a)
	mustPanic(t, "the count", func() {
		_ = a.commitCounted(func() error { return nil }, func() { panic("count panics") })
	})
	backlogLockFree(t, a)
}
