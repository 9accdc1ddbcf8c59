package runtime

import (
	"math"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	def := DefaultMemoryLimit()
	if def < AppMemoryAllowance+64<<20 || def > 1<<30 {
		t.Fatalf("DefaultMemoryLimit = %d MiB, want the store's budget (about 115 MiB) + %d MiB", def>>20, AppMemoryAllowance>>20)
	}
	for _, c := range []struct {
		in   string
		want int64
		auto bool
	}{
		{"auto", def, true},
		{"", def, true},
		{"off", math.MaxInt64, false},
		{"OFF", math.MaxInt64, false},
		{"512MiB", 512 << 20, false},
		{"512 MiB", 512 << 20, false},
		{"1.5GiB", 3 << 29, false},
		{"2gb", 2e9, false},
		{"300MB", 300e6, false},
		{"67108864", 64 << 20, false},
		{"65536KiB", 64 << 20, false},
	} {
		got, auto, err := ParseMemoryLimit(c.in)
		if err != nil || got != c.want || auto != c.auto {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v, %v; want %d, %v", c.in, got, auto, err, c.want, c.auto)
		}
	}
	for _, bad := range []string{"lots", "MiB", "12 parsecs", "-1GiB", "1MiB", "0", "NaN", "1e999GiB", "1..5GiB"} {
		if got, _, err := ParseMemoryLimit(bad); err == nil {
			t.Errorf("ParseMemoryLimit(%q) = %d, want an error", bad, got)
		}
	}
}
