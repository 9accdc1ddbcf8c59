package flowlet_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

// ValidStateName is the rule its doc states, which the app YAML's names follow.
func TestValidStateName(t *testing.T) {
	rule := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	names := []string{"", "a", "0", "_a", "-a", "a_", "a-b_c9", "A", "a.b", "a/b", "a b", "é", "a\x00",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat("_", 62)}
	for _, n := range names {
		if got, want := flowlet.ValidStateName(n), rule.MatchString(n); got != want {
			t.Errorf("ValidStateName(%q) = %v, want %v", n, got, want)
		}
	}
}

func FuzzValidStateName(f *testing.F) {
	rule := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	f.Add("a-b")
	f.Fuzz(func(t *testing.T, n string) {
		if got, want := flowlet.ValidStateName(n), rule.MatchString(n); got != want {
			t.Errorf("ValidStateName(%q) = %v, want %v", n, got, want)
		}
	})
}
