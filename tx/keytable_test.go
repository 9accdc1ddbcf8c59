package tx

import (
	"math/rand/v2"
	"testing"
)

// The key table behaves like a map whose absent keys read 0, through growth,
// overwrites, "deletes" (0) and the zero key.
func TestKeyTableMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tab := newKeyTable(4)
	ref := map[uint64]uint64{}
	keys := []uint64{0, 1} // the empty marker and its stand-in
	for i := 0; i < 20000; i++ {
		var k uint64
		if rng.IntN(4) == 0 && len(keys) > 0 {
			k = keys[rng.IntN(len(keys))]
		} else {
			k = rng.Uint64()
			keys = append(keys, k)
		}
		v := rng.Uint64N(1000) // 0 included: absent
		tab.set(k, v)
		ref[fix(k)] = v
	}
	for _, k := range keys {
		if got, want := tab.get(k), ref[fix(k)]; got != want {
			t.Fatalf("get(%d) = %d, want %d", k, got, want)
		}
	}
	n := 0
	tab.each(func(k, v uint64) {
		n++
		if ref[k] != v || v == 0 {
			t.Fatalf("each gave %d=%d, map has %d", k, v, ref[k])
		}
	})
	live := 0
	for _, v := range ref {
		if v != 0 {
			live++
		}
	}
	if n != live {
		t.Fatalf("each visited %d keys, want %d", n, live)
	}
	tab.clear()
	if tab.get(keys[5]) != 0 || tab.used != 0 {
		t.Fatal("clear left keys behind")
	}
}

// deleteIf leaves no tombstones: after any mix of swaps and deletes, in a
// small table where runs collide and wrap around the end, every key still
// reads as the model says and used counts exactly the live keys.
func TestKeyTableDeleteIfMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tab := newKeyTable(8)
	ref := map[uint64]uint64{}
	var keys []uint64
	for i := 0; i < 50000; i++ {
		// Few distinct low bits: long probe runs, many wrapping past the end.
		k := fix(rng.Uint64N(64)<<20 | rng.Uint64N(4) | uint64(len(tab.slots)-2))
		switch {
		case rng.IntN(2) == 0 && len(ref) < 40:
			v := 1 + rng.Uint64N(3)
			if old := tab.swap(k, v); old != ref[k] {
				t.Fatalf("step %d: swap(%x) replaced %d, model had %d", i, k, old, ref[k])
			}
			ref[k] = v
			keys = append(keys, k)
		case len(keys) > 0:
			k = keys[rng.IntN(len(keys))]
			v := 1 + rng.Uint64N(3)
			want := ref[k] == v && v != 0
			if got := tab.deleteIf(k, v); got != want {
				t.Fatalf("step %d: deleteIf(%x, %d) = %v, want %v", i, k, v, got, want)
			}
			if want {
				delete(ref, k)
			}
		}
		if tab.used != len(ref) {
			t.Fatalf("step %d: used %d, model has %d live keys", i, tab.used, len(ref))
		}
	}
	for _, k := range keys {
		if got := tab.get(k); got != ref[k] {
			t.Fatalf("get(%x) = %d, want %d", k, got, ref[k])
		}
	}
}
