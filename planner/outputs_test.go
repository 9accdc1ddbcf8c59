package planner

import (
	"slices"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

// flowlet.Register and pluginhost.Open check a type's declared outputs
// with flowlet.CheckOutputName; it must refuse what the planner refuses in
// a connection's from (nameRE, ReservedOutputs) and take the rest.
func TestOutputNameRulesAgreeWithFlowlet(t *testing.T) {
	names := append([]string{"", "out", "Out", "a.b", "-x", "x-", "_", "0", "a_b-c", "dlq2", "x-dlq",
		strings.Repeat("o", 63), strings.Repeat("o", 64)}, ReservedOutputs...)
	for _, n := range names {
		want := nameRE.MatchString(n) && !slices.Contains(ReservedOutputs, n)
		if got := flowlet.CheckOutputName(n) == nil; got != want {
			t.Errorf("output %q: flowlet.CheckOutputName takes it: %v, the planner: %v", n, got, want)
		}
	}
}
