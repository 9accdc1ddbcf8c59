package badgerq

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// TestTunedOptionsBuilderFit: with TunedOptions a table builder's allocator
// (twice the table size) holds any memtable flush, so Badger's pooled
// allocators never grow, and MemoryBudget counts them at that size.
func TestTunedOptionsBuilderFit(t *testing.T) {
	o := TunedOptions(t.TempDir(), true)
	if arena := arenaBytes(o.MemTableSize); 2*o.BaseTableSize < arena {
		t.Fatalf("BaseTableSize %d: builder allocators of %d bytes are smaller than a memtable arena (%d)", o.BaseTableSize, 2*o.BaseTableSize, arena)
	}
	if o.TableSizeMultiplier != 1 {
		t.Fatalf("TableSizeMultiplier %d, want 1", o.TableSizeMultiplier)
	}
	got := MemoryBudget(o)
	want := 4*arenaBytes(o.MemTableSize) + 8*2*o.BaseTableSize + 3*(3<<20)
	if got != want {
		t.Fatalf("MemoryBudget = %d, want %d", got, want)
	}
	// Doubling tables: the deepest level's builders count.
	o.TableSizeMultiplier = 2
	if deep := MemoryBudget(o); deep <= got {
		t.Fatalf("MemoryBudget with doubling tables %d, not above %d", deep, got)
	}
}

// TestMaxWrite: MaxWrite is the bound Badger enforces: a transaction of
// small values fails with ErrTxnTooBig once its keys and values reach the
// byte bound, and one of tiny entries once it reaches the entry bound.
func TestMaxWrite(t *testing.T) {
	o := TunedOptions("", false).WithInMemory(true).WithMemTableSize(1 << 20)
	db, err := badger.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	maxBytes, maxEntries := MaxWrite(db.Opts())
	if maxBytes != 15*(1<<20)/100 || maxEntries <= 0 {
		t.Fatalf("MaxWrite = %d, %d", maxBytes, maxEntries)
	}
	fill := func(value int) (n int, bytes int64) {
		txn := db.NewTransaction(true)
		defer txn.Discard()
		val := make([]byte, value)
		for {
			key := fmt.Appendf(nil, "k%08d", n)
			if err := txn.Set(key, val); err != nil {
				if !errors.Is(err, badger.ErrTxnTooBig) {
					t.Fatal(err)
				}
				return n, bytes
			}
			n++
			bytes += int64(len(key) + value)
		}
	}
	// Badger adds a few bytes per entry (version, meta) to its estimate.
	if n, b := fill(500); b > maxBytes || b+int64(n)*32 < maxBytes-600 {
		t.Errorf("500-byte values: refused after %d entries of %d bytes in all, want just under %d", n, b, maxBytes)
	}
	if n, _ := fill(0); int64(n) > maxEntries || int64(n) < maxEntries-2 {
		t.Errorf("empty values: refused after %d entries, want %d", n, maxEntries)
	}
}
