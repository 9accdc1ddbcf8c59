package runtime

import (
	"errors"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/queue"
)

// TestDLQOpenErrorSaysWhat: only a missing dead-letter queue is described
// as missing; any other failure to open it (a closed store) says what it is.
func TestDLQOpenErrorSaysWhat(t *testing.T) {
	a := openYAML(t, `
app: dlqopen
flowlets:
  src: {type: generator, config: {count: 1}}
  cnt: {type: t_take}
connections:
  - {from: src, to: cnt}
`, Options{})
	s := a.Inspect()
	err := s.DeadLetters("nosuch", 0, func(DeadLetter) bool { return true })
	if !errors.Is(err, queue.ErrUnknownQueue) || !strings.Contains(err.Error(), "has no dead-letter queue") {
		t.Errorf("DeadLetters of a flowlet without a DLQ: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	err = s.DeadLetters("cnt", 0, func(DeadLetter) bool { return true })
	if err == nil || strings.Contains(err.Error(), "has no dead-letter queue") {
		t.Errorf("DeadLetters on a closed store: %v, want the store's error, not 'has no dead-letter queue'", err)
	}
	_, _, err = s.ReplayDeadLetters("cnt", map[string]string{"src.out": ""})
	if err == nil || strings.Contains(err.Error(), "has no dead-letter queue") {
		t.Errorf("ReplayDeadLetters on a closed store: %v, want the store's error, not 'has no dead-letter queue'", err)
	}
}
