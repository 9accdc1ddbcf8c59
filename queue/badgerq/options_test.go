package badgerq

import "testing"

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
