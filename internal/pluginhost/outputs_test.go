package pluginhost_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/internal/pluginhost"
)

// TestBadDeclaredOutput: a plugin's declared outputs name queues as a
// built-in type's do, so Open refuses one that flowlet.Register would
// (flowlet.CheckOutputName): it was taken, and every connection from it
// refused by the planner, its emits dropped as unrouted.
func TestBadDeclaredOutput(t *testing.T) {
	for _, out := range []string{"dlq", "Out", ""} {
		o := options(t, nil)
		o.Env = []string{"UNARY_OUTPUT=" + out}
		p, err := pluginhost.Open(context.Background(), "unary", "unary", "testdata", o)
		var se *pluginhost.StartError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), fmt.Sprintf("%q", out)) {
			t.Errorf("output %q: %v, want a *StartError naming it", out, err)
		}
		if p != nil {
			p.Close()
		}
	}
}
