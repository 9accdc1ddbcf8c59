package httpapi_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// FuzzGetRequests sends the read endpoints of a running app any query
// string, through the handler itself (a panic fails the fuzz run, where a
// server would drop the connection): every answer is a 2xx, 4xx or 503,
// never a 500.
//
//	go test ./runtime/httpapi -run '^$' -fuzz FuzzGetRequests -fuzztime 1m
func FuzzGetRequests(f *testing.F) {
	a, _ := openApp(f, appYAML)
	runApp(f, a)
	// web.out keeps what is ingested: its tail has entries to read.
	ctx := context.Background()
	if err := a.Pause("cnt"); err != nil {
		f.Fatal(err)
	}
	if err := a.WaitPaused(ctx, "cnt"); err != nil {
		f.Fatal(err)
	}
	if _, err := a.Ingest(ctx, "cnt", "web.out", []runtime.IngestEvent{{Payload: []byte("p")}, {Payload: []byte("q")}}); err != nil {
		f.Fatal(err)
	}
	s, err := httpapi.New(a, httpapi.Config{})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	paths := []string{"/api/v1/queues/web.out/tail", "/api/v1/queues/gen.out/tail", "/api/v1/queues/cnt.dlq/tail", "/api/v1/dlq", "/api/v1/dlq/cnt",
		"/api/v1/state/cnt/n", "/api/v1/state/cnt/last", "/api/v1/state/cnt", "/api/v1/status", "/api/v1/queues", "/metrics", "/ready"}
	f.Add(uint8(0), "n=5000000000000000000")
	for i, q := range []string{"", "n=0&partition=0,6&from=1&to=99&since=1h&until=2999-01-01T00:00:00Z",
		"limit=9223372036854775807", "kind=counters&prefix=e&start_base64=ZTE=&limit=3", "key=total&kind=table", "key_base64=dG90YWw="} {
		f.Add(uint8(i), q)
	}
	f.Fuzz(func(t *testing.T, which uint8, query string) {
		r := httptest.NewRequest("GET", paths[int(which)%len(paths)], nil)
		r.URL.RawQuery = query
		r.Host = "127.0.0.1"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code/100 == 5 && w.Code != 503 {
			t.Fatalf("GET %s?%s: %d %s", r.URL.Path, query, w.Code, w.Body.String())
		}
	})
}
