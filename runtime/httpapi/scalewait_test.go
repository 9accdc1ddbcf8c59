package httpapi_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime/httpapi"
)

// TestScaleDownPendingIsAccepted: a scale-down whose removed instance is
// held in a step past the server's ScaleWait is answered 202 with what is
// pending (it was a 500, although the scale-down goes on), and it
// completes once the step is done.
func TestScaleDownPendingIsAccepted(t *testing.T) {
	_, open := holdGate.Hold(t)
	a, _ := openApp(t, `
app: sw
flowlets:
  gen: {type: generator, config: {rate: 200, batch: 5}}
  blk: {type: api_hold, instances: 2, batch_size: 1}
connections:
  - {from: gen, to: blk}
`)
	runApp(t, a)
	t.Cleanup(open) // before the run stops
	ts := serve(t, a, httpapi.Config{ScaleWait: 50 * time.Millisecond})
	// The deadline only guards against a hang.
	for deadline := time.Now().Add(30 * time.Second); holdGate.Waiting() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 instances in a step", holdGate.Waiting())
		}
	}

	resp, err := http.Post(ts.URL+"/api/v1/flowlets/blk/scale?instances=1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var sr httpapi.ScaleResponse
	err = json.NewDecoder(resp.Body).Decode(&sr)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusAccepted || sr.Previous != 2 || sr.Instances != 1 || !strings.Contains(sr.Pending, "in-flight") {
		t.Fatalf("scale-down with a step held: %d %+v, want 202 2 → 1 pending", resp.StatusCode, sr)
	}
	// A second scale meanwhile waits out the server's wait and is refused
	// (409, nothing changed): not hung until the step is done, and not a
	// 202 claiming its count is pending.
	client := &http.Client{Timeout: 30 * time.Second} // a hang detector
	resp, err = client.Post(ts.URL+"/api/v1/flowlets/blk/scale?instances=2", "", nil)
	if err != nil {
		t.Fatalf("scale while a scale-down is pending: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "in progress") {
		t.Fatalf("scale while a scale-down is pending: %d %s, want 409", resp.StatusCode, body)
	}
	open()
	for deadline := time.Now().Add(30 * time.Second); a.Instances("blk") != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the scale-down never completed: %d instances", a.Instances("blk"))
		}
	}
}

// TestClientScaleEscapesName: a flowlet name with a slash or a question
// mark reaches the server whole (unknown flowlet, named), instead of
// another route's 404 or 405.
func TestClientScaleEscapesName(t *testing.T) {
	a, _ := openApp(t, `
app: esc
flowlets:
  gen: {type: generator, config: {count: 1}}
  out: {type: stdout_sink}
connections:
  - {from: gen, to: out}
`)
	ts := serve(t, a, httpapi.Config{})
	c := &httpapi.Client{URL: ts.URL}
	for _, name := range []string{"a/b", "x?instances=3", "p%2Fq"} {
		_, err := c.Scale(t.Context(), name, 1)
		var ae *httpapi.APIError
		if !errors.As(err, &ae) || ae.Code != http.StatusNotFound || !strings.Contains(ae.Error(), name) {
			t.Errorf("scale %q: %v, want 404 naming it", name, err)
		}
	}
}
