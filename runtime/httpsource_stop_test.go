package runtime_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// TestHTTPSourceGaveUpAnswers: a request to an http_source that stops after
// its retries (here: its events cannot be partitioned by the hash key its
// consumer needs) is answered 503 at once, while the app runs on; it was
// left waiting until the client gave up. A request after the stop is
// refused too, through App.Ingest as well (a 503 in the HTTP API).
func TestHTTPSourceGaveUpAnswers(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	a := runApp(t, plan(t, dir, `
app: t
flowlets:
  in: {type: http_source, retries: {max: 0}, config: {addr: "`+addr+`"}}
  c: {type: t_count}
connections:
  - {from: in, to: c, strategy: hash, key: user}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	// A hang deadline only: the answer is due as soon as the source stops.
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Post("http://"+addr+"/", "text/plain", strings.NewReader("x1\n"))
	if err != nil {
		t.Fatalf("POST to a source that gives up: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("POST to a source that gives up: %d, want 503", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = a.Ingest(ctx, "in", "", []runtime.IngestEvent{{Payload: []byte("x2")}})
	if !errors.Is(err, runtime.ErrNotRunning) || ctx.Err() != nil {
		t.Fatalf("Ingest to a stopped source: %v (ctx %v), want ErrNotRunning", err, ctx.Err())
	}
	if st := a.Status(); st.Flowlets[0].Name != "in" || st.Flowlets[0].Done != 1 {
		t.Errorf("status of the stopped source: %+v", st.Flowlets[0])
	}
}
