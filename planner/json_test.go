package planner

import (
	"encoding/json"
	"strings"
	"testing"
)

// A plan's JSON (flowrun plan --json) uses the app file's names and writes
// durations as the file does.
func TestPlanJSON(t *testing.T) {
	src := `app: x
flowlets:
  src: {type: file_source}
  a: {type: counter, tick: 1s, retries: {backoff: 20ms}}
connections:
  - {from: src, to: a, partitions: 2}
`
	p, err := Parse("app.yaml", []byte(src), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		`"app":"x"`,
		`{"name":"src","type":"file_source","instances":1,"batch_size":100,"retries":{"max":3,"backoff":"10ms","max_backoff":"1s"},"config":{},"outputs":["out"],"pos":{"file":"app.yaml","line":3,"col":3}}`,
		`"retries":{"max":3,"backoff":"20ms","max_backoff":"1s"}`,
		`"inputs":["src.out"],"pos":{"file":"app.yaml","line":4,"col":3},"tick":"1s"}`,
		`"queues":[{"name":"src.out","producer":"src","output":"out","partitions":2,"groups":[{"name":"a","strategy":"fifo","instances":1}]}]`,
		`"connections":[{"from":"src","output":"out","to":"a","strategy":"fifo","partitions":2,"pos":`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan JSON lacks\n%s\nin\n%s", want, got)
		}
	}
}
