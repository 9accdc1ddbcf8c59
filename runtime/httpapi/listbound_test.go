package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// TestTailByteBound: a tail of every entry (n=0) of a queue holding more
// than runtime.MaxListBytes answers only the newest entries that fit, with
// the Flowrun-Truncated header; it built the whole queue (up to 200,000
// entries of up to 1 MiB) in the running app's memory.
func TestTailByteBound(t *testing.T) {
	a, ts := startApp(t, httpapi.Config{})
	ctx := context.Background()
	if err := a.Pause("cnt"); err != nil { // its input keeps what is ingested
		t.Fatal(err)
	}
	if err := a.WaitPaused(ctx, "cnt"); err != nil {
		t.Fatal(err)
	}
	const n = runtime.MaxListBytes/runtime.MaxPayload + 2
	for i := range n {
		p := bytes.Repeat([]byte{'a' + byte(i)}, runtime.MaxPayload)
		if _, err := a.Ingest(ctx, "cnt", "web.out", []runtime.IngestEvent{{Payload: p}}); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := http.Get(ts.URL + "/api/v1/queues/web.out/tail?n=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var es []httpapi.EntryJSON
	if err := json.NewDecoder(resp.Body).Decode(&es); err != nil {
		t.Fatal(err)
	}
	payload := 0
	for _, e := range es {
		payload += len(e.Payload.Raw())
	}
	if resp.StatusCode != 200 || resp.Header.Get(httpapi.TruncatedHeader) != "true" || payload > runtime.MaxListBytes || len(es) == 0 {
		t.Fatalf("tail of %d MiB: %d, %d entries, %d payload bytes, %s %q; want at most %d bytes, truncated",
			n, resp.StatusCode, len(es), payload, httpapi.TruncatedHeader, resp.Header.Get(httpapi.TruncatedHeader), runtime.MaxListBytes)
	}
	if last := es[len(es)-1].Payload.Raw(); last[0] != 'a'+byte(n-1) {
		t.Errorf("the answer ends with %q…, not the newest entry", last[:1])
	}
	// An n past any count is every entry, as n=0: n above MaxInt/2 made
	// the tail's 2n wrap negative and the handler panic (no answer).
	resp, err = http.Get(ts.URL + "/api/v1/queues/web.out/tail?n=5000000000000000000")
	if err != nil {
		t.Fatalf("tail of n=5e18: %v", err)
	}
	defer resp.Body.Close()
	var all []httpapi.EntryJSON
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil || resp.StatusCode != 200 || len(all) != len(es) {
		t.Errorf("tail of n=5e18: %d, %d entries, %v; want the %d of n=0", resp.StatusCode, len(all), err, len(es))
	}
}
