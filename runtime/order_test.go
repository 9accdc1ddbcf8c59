package runtime_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// t_order counts events that arrive out of order: a generator's payloads
// "event N" should come as 0, 1, 2, … (table "last", counter "bad").
type orderFlowlet struct{}

func (orderFlowlet) Process(ctx flowlet.Context, ev flowlet.Event) error {
	n, err := strconv.ParseUint(strings.TrimPrefix(string(ev.Payload), "event "), 10, 64)
	if err != nil {
		return err
	}
	t := ctx.State("last")
	v, ok, err := t.Get([]byte("next"))
	if err != nil {
		return err
	}
	want := uint64(0)
	if ok {
		want = binary.BigEndian.Uint64(v)
	}
	if n != want {
		if err := ctx.Counters("bad").Add([]byte("n"), 1); err != nil {
			return err
		}
	}
	return t.Put([]byte("next"), binary.BigEndian.AppendUint64(nil, n+1))
}

func init() {
	flowlet.Register("t_order", func() flowlet.Flowlet { return orderFlowlet{} }, flowlet.TypeInfo{})
}

// Order is kept within a partition. A keyless stream is spread over a
// queue's partitions (runs of 256 events), so one consumer instance reads it
// out of order (a user's stdin → stdout pipe came out as 257–356, 513–612,
// …, 1–256); `partitions: 1` on the connection keeps it in commit order. A
// partition count the stored queue does not have is refused.
func TestPartitionsOneKeepsOrder(t *testing.T) {
	for _, parts := range []int{0, 1} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			dir := t.TempDir()
			conn := "{from: gen, to: c}"
			if parts > 0 {
				conn = fmt.Sprintf("{from: gen, to: c, partitions: %d}", parts)
			}
			app := `
app: t
flowlets:
  gen: {type: generator, config: {count: 5000, batch: 1000}}
  c: {type: t_order}
connections:
  - ` + conn + "\n"
			a := runDrain(t, dir, app, runtime.Options{NoSync: true})
			bad := counter(t, a, "c", "bad", "n")
			tx := a.Status().Tx
			a.Close()
			// Nothing failed or conflicted: every abort was an empty step
			// or the read of the counter above.
			if tx.Aborted != 0 || tx.EmptySteps == 0 || tx.ReadOnly == 0 {
				t.Errorf("tx status: %d aborted, %d empty steps, %d read-only; want 0, some and some", tx.Aborted, tx.EmptySteps, tx.ReadOnly)
			}
			if parts == 1 && bad != 0 {
				t.Fatalf("%d events out of order with partitions: 1", bad)
			}
			if parts == 0 && bad == 0 {
				t.Fatal("no event out of order over 64 partitions: the test no longer shows what partitions: 1 is for")
			}
			if parts == 1 {
				return
			}
			_, err := runtime.Open(plan(t, dir, strings.Replace(app, "to: c}", "to: c, partitions: 1}", 1)), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
			if err == nil || !strings.Contains(err.Error(), "has 64 partitions and the app now asks for 1") {
				t.Fatalf("reopen with partitions: 1: %v, want the fixed-partitions error", err)
			}
		})
	}
}
