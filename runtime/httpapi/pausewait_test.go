package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/testgate"
	"github.com/flowrun/flowrun/runtime/httpapi"
)

// api_hold counts its events and holds each step while holdGate is held.
var holdGate testgate.Gate

func init() {
	flowlet.Register("api_hold", func() flowlet.Flowlet { return testgate.Counting(&holdGate) }, flowlet.TypeInfo{})
}

// TestPauseWaitEnds: a pause?wait whose flowlet has a step held in flight
// answers 409 when a resume comes meanwhile, and a client that gives up
// ends its handler (the test server's Close waits for every handler).
func TestPauseWaitEnds(t *testing.T) {
	entered, open := holdGate.Hold(t) // opened before the app stops (below)

	a, _ := openApp(t, `
app: pw
flowlets:
  gen: {type: generator, config: {rate: 200, batch: 5}}
  blk: {type: api_hold, batch_size: 1}
connections:
  - {from: gen, to: blk}
`)
	runApp(t, a)
	t.Cleanup(open) // before the run stops
	ts := serve(t, a, httpapi.Config{})
	u := ts.URL + "/api/v1/flowlets/blk"
	<-entered // a step of blk is held in flight

	// A resume during the wait: 409.
	answer := make(chan int, 1)
	go func() {
		resp, err := http.Post(u+"/pause?wait=1m", "", nil)
		if err != nil {
			t.Error(err)
			answer <- 0
			return
		}
		resp.Body.Close()
		answer <- resp.StatusCode
	}()
	waitFor(t, "blk paused", func() bool { return flowletOf(a.Status(), "blk").Paused })
	if code, b := do(t, "POST", u+"/resume", "", ""); code != 200 {
		t.Fatalf("resume: %d %s", code, b)
	}
	if code := <-answer; code != http.StatusConflict {
		t.Errorf("pause?wait resumed meanwhile: %d, want 409", code)
	}

	// A client that gives up: its handler ends (Close below returns).
	rctx, rcancel := context.WithCancel(context.Background())
	go func() {
		req, _ := http.NewRequestWithContext(rctx, "POST", u+"/pause?wait=2m", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Errorf("pause?wait answered %d with a step held in flight", resp.StatusCode)
		}
		answer <- 0
	}()
	waitFor(t, "blk paused", func() bool { return flowletOf(a.Status(), "blk").Paused })
	rcancel()
	<-answer
	ts.Close() // waits for the handler; the step is still held
	if f := flowletOf(a.Status(), "blk"); !f.Paused || f.Parked {
		t.Errorf("blk: %+v, want paused with its step in flight", f)
	}
}

// TestPauseBeforeRun: a pause answered before the app runs says parked only
// for a flowlet that runs no step before it sees the pause; a file sink
// publishes when the app starts, paused or not, so it is not parked yet
// (it was answered parked at once).
func TestPauseBeforeRun(t *testing.T) {
	a, _ := openApp(t, `
app: pbr
flowlets:
  gen: {type: generator, config: {count: 3}}
  cnt: {type: api_count}
  sink: {type: file_sink, config: {path: {dir}/out.txt}}
connections:
  - {from: gen, to: cnt}
  - {from: gen, to: sink}
`)
	ts := serve(t, a, httpapi.Config{})
	for fl, want := range map[string]bool{"cnt": true, "sink": false} {
		code, body := do(t, "POST", ts.URL+"/api/v1/flowlets/"+fl+"/pause?wait=1ms", "", "")
		var resp httpapi.PauseResponse
		if err := json.Unmarshal(body, &resp); code != 200 || err != nil || resp.Parked == nil {
			t.Fatalf("pause %s: %d %s", fl, code, body)
		}
		if *resp.Parked != want {
			t.Errorf("pause %s before the app runs: parked %v, want %v", fl, *resp.Parked, want)
		}
	}
}

// TestIngestIntoPausedSource: an ingest into a paused http_source is
// refused at once, 503 with Retry-After (back-pressure: send again after
// the resume), not held until the resume; after it, it is taken.
func TestIngestIntoPausedSource(t *testing.T) {
	a, ts := startApp(t, httpapi.Config{})
	if err := a.Pause("web"); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: time.Minute} // a hang deadline only
	resp, err := client.Post(ts.URL+"/api/v1/ingest/web", "text/plain", strings.NewReader("p1\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("ingest into the paused source: %d, Retry-After %q; want 503, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if err := a.Resume("web"); err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, "POST", ts.URL+"/api/v1/ingest/web", "", "p2\n"); code != 200 {
		t.Errorf("ingest after the resume: %d %s", code, body)
	}
}
