package tx

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// Start while the Context's transaction is open is refused: it used to start
// a second one and forget the first, which stayed in progress (holding the
// read snapshot back, its keys if it had passed CanCommit) until it timed
// out — a day for a long transaction.
func TestContextStartWhileOpenRefused(t *testing.T) {
	c := mustOpen(t, Options{})
	r := &recorder{}
	ctx := c.NewContext(r)
	first := must[*Tx](t)(ctx.StartLong())
	before := c.Stats()
	for name, start := range map[string]func() (*Tx, error){
		"Start":     func() (*Tx, error) { return ctx.Start(time.Minute) },
		"StartLong": ctx.StartLong,
	} {
		if tx, err := start(); !errors.Is(err, ErrMisuse) || tx != nil {
			t.Errorf("%s while tx %d is open = %v, %v; want ErrMisuse", name, first.ID, tx, err)
		}
	}
	if s := c.Stats(); s.Started != before.Started || s.NextPointer != before.NextPointer {
		t.Errorf("a refused start changed the coordinator: %+v -> %+v", before, s)
	}
	if ctx.Tx() != first || !slices.Equal(c.InProgress(), []uint64{first.ID}) {
		t.Fatalf("the open transaction was replaced: ctx has %v, in progress %v", ctx.Tx(), c.InProgress())
	}
	if err := ctx.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.Start(time.Minute); err != nil {
		t.Fatalf("Start after Finish: %v", err)
	}
}

// A nil participant is refused before anything starts; it used to panic in
// StartTx with the transaction already in progress.
func TestContextNilParticipantRefused(t *testing.T) {
	c := mustOpen(t, Options{})
	for _, ctx := range []*Context{c.NewContext(nil), c.NewContext(&recorder{}, nil)} {
		if _, err := ctx.Start(time.Minute); !errors.Is(err, ErrMisuse) {
			t.Errorf("Start with a nil participant = %v, want ErrMisuse", err)
		}
		if _, err := ctx.StartLong(); !errors.Is(err, ErrMisuse) {
			t.Errorf("StartLong with a nil participant = %v, want ErrMisuse", err)
		}
	}
	ctx := c.NewContext()
	ctx.Add(nil)
	if _, err := ctx.Start(time.Minute); !errors.Is(err, ErrMisuse) {
		t.Errorf("Start after Add(nil) = %v, want ErrMisuse", err)
	}
	if s := c.Stats(); s.Started != 0 || len(c.InProgress()) != 0 {
		t.Fatalf("a refused start started something: %+v", s)
	}
}

// panicker is a recorder that panics at one step.
type panicker struct {
	recorder
	at string
}

func (p *panicker) hit(step string) {
	if p.at == step {
		panic("boom at " + step)
	}
}
func (p *panicker) StartTx(tx *Tx) error  { p.hit("start"); return p.recorder.StartTx(tx) }
func (p *panicker) UpdateTx(tx *Tx) error { p.hit("update"); return p.recorder.UpdateTx(tx) }
func (p *panicker) ChangeKeys() [][]byte  { p.hit("changes"); return p.recorder.ChangeKeys() }
func (p *panicker) Persist() error        { p.hit("persist"); return p.recorder.Persist() }
func (p *panicker) Rollback() error       { p.hit("rollback"); return p.recorder.Rollback() }

// A participant that panics at any step leaves no transaction open: the
// panic goes on (the same value), but first every participant is rolled back
// and the transaction aborted — invalidated when a rollback panicked. It used
// to stay in progress, and after CanCommit hold its keys, until it timed out.
func TestContextParticipantPanics(t *testing.T) {
	for _, tc := range []struct {
		at      string
		long    bool // Checkpoint before Finish
		failing bool // another participant fails its Persist (Abort runs the rollbacks)
		invalid bool
	}{
		{at: "start"},
		{at: "update", long: true},
		{at: "changes"},
		{at: "persist"},
		{at: "rollback", failing: true, invalid: true},
	} {
		t.Run(tc.at, func(t *testing.T) {
			c := mustOpen(t, Options{})
			other := &recorder{keys: [][]byte{[]byte("k")}, failPersist: tc.failing}
			p := &panicker{at: tc.at}
			ctx := c.NewContext(other, p)
			var tx *Tx
			got := func() (r any) {
				defer func() { r = recover() }()
				if tc.long {
					tx, _ = ctx.StartLong()
					ctx.Checkpoint()
				} else {
					tx, _ = ctx.Start(time.Minute)
				}
				ctx.Finish()
				return nil
			}()
			if got != "boom at "+tc.at {
				t.Fatalf("recovered %v, want the participant's panic", got)
			}
			if ctx.Tx() != nil || len(c.InProgress()) != 0 {
				t.Fatalf("a panic left the transaction open: ctx %v, in progress %v", ctx.Tx(), c.InProgress())
			}
			if tx == nil {
				tx = &Tx{ID: 1}
			}
			if inv := slices.Contains(c.InvalidList(), tx.ID); inv != (tc.invalid || tc.long) {
				t.Fatalf("invalid = %v, want %v", inv, tc.invalid || tc.long)
			}
			if !slices.Contains(other.calls, "rollback") {
				t.Fatalf("the other participant was not rolled back: %v", other.calls)
			}
			// Its keys are free: a later transaction commits the same key.
			next := c.NewContext(&recorder{keys: [][]byte{[]byte("k")}})
			must[*Tx](t)(next.Start(time.Minute))
			if err := next.Finish(); err != nil {
				t.Fatalf("the key stayed held: %v", err)
			}
			p.at = ""
			if _, err := ctx.Start(time.Minute); err != nil {
				t.Fatalf("the Context is not reusable after the panic: %v", err)
			}
		})
	}
}

// A Checkpoint the coordinator refuses (the transaction timed out, the
// coordinator closed) ends the transaction like a failed Finish: every
// participant rolled back, the Context free for the next Start. It used to
// return the error with the transaction still open in the Context and its
// participants holding what they persisted under it.
func TestContextCheckpointRefusedAborts(t *testing.T) {
	clock := newFakeClock()
	c := mustOpen(t, Options{Now: clock.Now, LongTimeout: time.Minute})
	r := &recorder{}
	ctx := c.NewContext(r)
	tx := must[*Tx](t)(ctx.StartLong())
	clock.Advance(2 * time.Minute)
	if err := ctx.Checkpoint(); !errors.Is(err, ErrNotInProgress) {
		t.Fatalf("Checkpoint of a timed-out transaction = %v, want ErrNotInProgress", err)
	}
	if ctx.Tx() != nil || !slices.Contains(r.calls, "rollback") {
		t.Fatalf("after a refused checkpoint: ctx has %v, participant calls %v; want it rolled back and ended", ctx.Tx(), r.calls)
	}
	if !slices.Contains(c.InvalidList(), tx.ID) || len(c.InProgress()) != 0 {
		t.Fatalf("invalid %v, in progress %v", c.InvalidList(), c.InProgress())
	}
	if _, err := ctx.Start(time.Minute); err != nil {
		t.Fatalf("Start after the refused checkpoint: %v", err)
	}
}

// Ending a Context's transaction twice, in any order, ends it once: the
// second Finish or FinishDeferred fails ErrNotInProgress, a second Abort
// returns its cause and rolls nothing back again, and the coordinator counts
// one end.
func TestContextEndTwice(t *testing.T) {
	c := mustOpen(t, Options{})
	r := &recorder{keys: [][]byte{[]byte("k")}}
	ctx := c.NewContext(r)
	ends := map[string]func() error{
		"Finish":         ctx.Finish,
		"FinishDeferred": func() error { _, err := ctx.FinishDeferred(); return err },
		"Abort":          func() error { return ctx.Abort(nil) },
	}
	for first, end1 := range ends {
		for second, end2 := range ends {
			must[*Tx](t)(ctx.Start(time.Minute))
			if err := end1(); err != nil {
				t.Fatalf("%s: %v", first, err)
			}
			before, calls := c.Stats(), len(r.calls)
			err := end2()
			if second == "Abort" {
				if err != nil || len(r.calls) != calls {
					t.Errorf("%s after %s = %v, calls %v", second, first, err, r.calls[calls:])
				}
			} else if !errors.Is(err, ErrNotInProgress) {
				t.Errorf("%s after %s = %v, want ErrNotInProgress", second, first, err)
			}
			if after := c.Stats(); after.Committed != before.Committed || after.Aborted != before.Aborted || after.InProgress != 0 {
				t.Errorf("%s after %s changed the coordinator: %+v -> %+v", second, first, before, after)
			}
		}
	}
	checkStatsAddUp(t, c, "after the ends")
}
