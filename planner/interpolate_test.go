package planner

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestInterpolationBounded: ${VAR} substitutions had no bound, so a large
// variable referenced many times (in many values, or many times in one)
// took memory without limit: 1 MiB referenced a thousand times in a 10 KB
// file was a gigabyte. Like aliases, substitutions share a budget
// (maxInterpolated bytes); past it the file fails with one *Error at the
// value where it ran out.
func TestInterpolationBounded(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	lookup := func(name string) (string, bool) { return big, name == "BIG" }
	n := maxInterpolated>>20 + 2
	var many strings.Builder
	for i := range n {
		fmt.Fprintf(&many, "      k%d: ${BIG}\n", i)
	}
	for name, c := range map[string]struct {
		src       string
		line, col int
	}{
		"many values": {"app: x\nflowlets:\n  a:\n    type: t\n    config:\n" + many.String(), 5 + n - 1, 11},
		"one value":   {"app: x\nflowlets:\n  a:\n    type: t\n    config:\n      k: " + strings.Repeat("${BIG}", n) + "\n", 6, 10},
	} {
		_, err := Parse("x.yaml", []byte(c.src), Options{LookupEnv: lookup})
		var list ErrorList
		if !errors.As(err, &list) {
			t.Errorf("%s: got %v, want errors", name, err)
			continue
		}
		var over []*Error
		for _, e := range list {
			if strings.Contains(e.Msg, "expand to more than") {
				over = append(over, e)
			}
		}
		if len(over) != 1 || over[0].Line != c.line || over[0].Col != c.col || over[0].File != "x.yaml" {
			t.Errorf("%s: errors %v, want one at x.yaml:%d:%d saying the substitutions expand to more than %d bytes", name, list, c.line, c.col, maxInterpolated)
		}
	}
	// Under the budget a large variable is taken, as often as it fits.
	src := "app: x\nflowlets:\n  a:\n    type: t\n    config: {a: '${BIG}', b: '${BIG}'}\n"
	p, err := Parse("x.yaml", []byte(src), Options{LookupEnv: lookup})
	if err != nil {
		t.Fatalf("two references of 1 MiB: %v", err)
	}
	if a, _ := p.Flowlet("a").Config["b"].(string); a != big {
		t.Errorf("config b has %d bytes, want %d", len(a), len(big))
	}
}
