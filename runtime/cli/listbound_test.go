package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// testReject dead-letters every event it is given.
type testReject struct{}

func (testReject) Process(flowlet.Context, flowlet.Event) error {
	return flowlet.Permanent(errors.New("rejected"))
}

func init() {
	flowlet.Register("clitest_reject", func() flowlet.Flowlet { return testReject{} }, flowlet.TypeInfo{Sink: true, Doc: "test: rejects every event"})
}

// TestOfflineListingsByteBound: queue tail -n 0 and dlq ls of a store
// holding more than runtime.MaxListBytes list only what fits (the newest
// entries, the first dead letters) and say on stderr that they were cut,
// as the HTTP API does; they built every entry in the CLI's memory.
func TestOfflineListingsByteBound(t *testing.T) {
	const events, size = 12, runtime.MaxListBytes / 10 // 12 events: 9.6 MiB
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	app := writeApp(t, dir, "app.yaml", fmt.Sprintf(`app: big
flowlets:
  gen: {type: generator, config: {count: %d, payload: "{seq}:%s"}}
  rej: {type: clitest_reject}
connections:
  - {from: gen, to: rej}
`, events, strings.Repeat("x", size)))
	if code, out := runCLI(t, "run", "--drain", "--progress", "never", "--no-sync", "--http", "off", "--data", data, app); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{
		{"queue", "tail", "-n", "0", "--json", "--data", data, app, runtime.DLQName("rej")},
		{"dlq", "ls", "--json", "--data", data, app},
	} {
		code, stdout, stderr := runCLI2(t, args...)
		var list []struct{ Payload runtime.Bytes }
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", args[:2], code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &list); err != nil {
			t.Fatalf("%s: %v", args[:2], err)
		}
		held := 0
		for _, e := range list {
			held += len(e.Payload.Raw())
		}
		if len(list) == 0 || held > runtime.MaxListBytes || !strings.Contains(stderr, "truncated") {
			t.Errorf("%s of %d events of %d bytes: %d listed, %d bytes; stderr %q; want at most %d bytes and a note",
				args[:2], events, size, len(list), held, stderr, runtime.MaxListBytes)
		}
	}
}
