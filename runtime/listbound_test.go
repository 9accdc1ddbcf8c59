package runtime_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/flowrun/flowrun/runtime"
)

// TestListingsByteBound: the dead-letter and state listings stop at a byte
// bound (the HTTP API's answers are built in the running app's memory) and
// say so: truncated, and for state the key to go on from.
func TestListingsByteBound(t *testing.T) {
	dir := t.TempDir()
	a := runDrain(t, dir, `
app: lb
flowlets:
  gen: {type: generator, config: {count: 200, batch: 10, payload: "payload-{seq}"}}
  c: {type: t_count, retries: {max: 0}, config: {fail: "7"}}
connections:
  - {from: gen, to: c}
`, runtime.Options{NoSync: true})
	a.Close()
	s, err := runtime.OpenStore(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	all, truncated, err := s.DeadLetterListBounded([]string{"gen", "c"}, 0, 0)
	if err != nil || truncated || len(all) < 20 {
		t.Fatalf("dead letters, unbounded: %d, truncated %v, %v", len(all), truncated, err)
	}
	got, truncated, err := s.DeadLetterListBounded([]string{"gen", "c"}, 0, 2000)
	if err != nil || !truncated || len(got) == 0 || len(got) >= len(all) {
		t.Errorf("dead letters bounded to 2000 bytes: %d of %d, truncated %v, %v", len(got), len(all), truncated, err)
	}
	for i := range got {
		if got[i].EventID != all[i].EventID {
			t.Errorf("bounded dead letter %d: %s, want %s (the first ones)", i, got[i].EventID, all[i].EventID)
		}
	}

	table := runtime.TableInfo{Name: "seen", Kind: "counters"}
	err = s.View("lb", "c", func(r runtime.StateReader) error {
		full, err := runtime.ScanStateTableBounded(r, table, flowletScanAll, 0)
		if err != nil || full.Truncated || len(full.Entries) < 100 {
			return fmt.Errorf("unbounded scan: %d entries, truncated %v, %v", len(full.Entries), full.Truncated, err)
		}
		part, err := runtime.ScanStateTableBounded(r, table, flowletScanAll, 1000)
		if err != nil {
			return err
		}
		n := len(part.Entries)
		if !part.Truncated || n == 0 || n >= len(full.Entries) || part.Next == nil || string(part.Next.Raw()) != string(full.Entries[n].Key.Raw()) {
			return fmt.Errorf("scan bounded to 1000 bytes: %d of %d entries, truncated %v, next %v", n, len(full.Entries), part.Truncated, part.Next)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
