package runtime

import (
	"testing"

	"github.com/flowrun/flowrun/flowlet"
)

type observerFlowlet struct{}

func (observerFlowlet) Committed() {}
func (observerFlowlet) Aborted()   {}

type publisherFlowlet struct{}

func (publisherFlowlet) Publish(flowlet.Context) error { return nil }

// Only an instance whose commits nobody outside the store hears of commits
// deferred: the HTTP source answers its clients (a StepObserver) and sinks
// publish (a Publisher) only after a durable commit.
func TestCanDeferOnlyWithoutOutsideEffects(t *testing.T) {
	for _, c := range []struct {
		name string
		in   *instance
		want bool
	}{
		{"plain", &instance{}, true},
		{"observer", &instance{obs: observerFlowlet{}}, false},
		{"publisher", &instance{pub: publisherFlowlet{}}, false},
	} {
		if got := c.in.canDefer(); got != c.want {
			t.Errorf("%s: canDefer = %v, want %v", c.name, got, c.want)
		}
	}
}
