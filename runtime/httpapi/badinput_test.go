package httpapi_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime/httpapi"
)

// TestBadInputs: malformed, oversized or nonsensical requests are answered
// with a 4xx and a JSON error, never a 500 (nor a panic).
func TestBadInputs(t *testing.T) {
	_, ts := startApp(t, httpapi.Config{})
	u := ts.URL
	big := strings.Repeat("x", 2<<20) // one line over MaxPayload
	for _, c := range []struct {
		method, path, body string
		code               int
	}{
		{"POST", "/api/v1/flowlets/cnt/scale", `{"instances": -1}`, 400},
		{"POST", "/api/v1/flowlets/cnt/scale", `{"instances": 0}`, 400},
		{"POST", "/api/v1/flowlets/cnt/scale", `{"instances": 1000000}`, 400},
		{"POST", "/api/v1/flowlets/cnt/scale?instances=-3", ``, 400},
		{"POST", "/api/v1/flowlets/cnt/scale?instances=x", ``, 400},
		{"POST", "/api/v1/flowlets/cnt/scale", `{"instances": "two"}`, 400},
		{"POST", "/api/v1/flowlets/cnt/scale", `{"instances": 1e99}`, 400},
		{"POST", "/api/v1/flowlets/cnt/scale", `{`, 400},
		{"POST", "/api/v1/flowlets/cnt/scale", ``, 400},
		{"POST", "/api/v1/flowlets/cnt/scale", `{"instances": 2} {"instances": 3}`, 400}, // used to scale to 2
		{"POST", "/api/v1/flowlets/nope/scale", `{"instances": 2}`, 404},
		{"POST", "/api/v1/flowlets/gen/scale", `{"instances": 2}`, 409},
		{"POST", "/api/v1/flowlets/nope/pause", ``, 404},
		{"POST", "/api/v1/flowlets/nope/resume", ``, 404},
		{"POST", "/api/v1/flowlets/cnt/pause?wait=-1s", ``, 400},
		{"POST", "/api/v1/flowlets/cnt/pause?wait=x", ``, 400},
		{"POST", "/api/v1/flowlets/cnt/resume?wait=1s", ``, 400},
		{"GET", "/api/v1/state/nope", ``, 404},
		{"GET", "/api/v1/state/nope/t", ``, 404},
		{"GET", "/api/v1/state/cnt/n?kind=bogus", ``, 400},
		{"GET", "/api/v1/state/cnt/n?kind=counters&limit=-1", ``, 400},
		{"GET", "/api/v1/state/cnt/n?kind=counters&key_base64=!!!", ``, 400},
		// A query that does not parse used to lose its bad parameter
		// unseen: a key lookup answered a scan of every key, 200.
		{"GET", "/api/v1/state/cnt/n?key_base64=%zz", ``, 400},
		{"GET", "/api/v1/state/cnt/n?key=a%", ``, 400},
		{"GET", "/api/v1/queues/gen.out/tail?partition=%zz", ``, 400},
		{"POST", "/api/v1/flowlets/cnt/pause?wait=1s;x", ``, 400},
		// A misspelled parameter was ignored unseen: the tail of every
		// partition, the default limit, a pause that did not wait.
		{"GET", "/api/v1/queues/gen.out/tail?partiton=3", ``, 400},
		{"GET", "/api/v1/queues/gen.out/tail?n=1&sinse=10m", ``, 400},
		{"GET", "/api/v1/dlq?limt=5", ``, 400},
		{"GET", "/api/v1/state/cnt/n?kind=counters&prefx=a", ``, 400},
		{"POST", "/api/v1/flowlets/cnt/pause?wiat=1s", ``, 400},
		{"POST", "/api/v1/flowlets/cnt/scale?instance=2", ``, 400},
		{"POST", "/api/v1/ingest/web?splt=body", "a\n", 400},
		{"GET", "/api/v1/status?verbose=1", ``, 400},
		{"GET", "/api/v1/state/cnt/nosuchtable", ``, 404},
		{"GET", "/api/v1/queues/nope/tail", ``, 404},
		{"GET", "/api/v1/queues/gen.out/tail?n=-1", ``, 400},
		{"GET", "/api/v1/queues/gen.out/tail?partition=x", ``, 400},
		{"GET", "/api/v1/queues/gen.out/tail?partition=-1", ``, 400},
		{"GET", "/api/v1/queues/gen.out/tail?partition=99999", ``, 400},
		{"GET", "/api/v1/queues/gen.out/tail?from=zz", ``, 400},
		{"GET", "/api/v1/queues/gen.out/tail?to=0", ``, 400},
		{"GET", "/api/v1/queues/gen.out/tail?since=yesterday", ``, 400},
		{"GET", "/api/v1/dlq?limit=-1", ``, 400},
		{"GET", "/api/v1/dlq/nope", ``, 404},
		{"POST", "/api/v1/dlq/nope/replay", ``, 404},
		{"POST", "/api/v1/dlq/gen/replay", ``, 400},
		{"POST", "/api/v1/ingest/nope", "a\n", 404},
		{"POST", "/api/v1/ingest/gen", "a\n", 400},
		{"POST", "/api/v1/ingest/gen", "", 400},                                        // no events: a source that takes none answered 200, 0 accepted
		{"POST", "/api/v1/ingest/cnt", `{"events": [{"payload": "a"}]}`, 400},          // gen.out is keyed by k: an event without it
		{"POST", "/api/v1/ingest/cnt?input=nope", "a\n", 400},                          // two inputs: name one
		{"POST", "/api/v1/ingest/cnt?input=web.out", big + "\n", 400},                  // over MaxPayload
		{"POST", "/api/v1/ingest/web", big, 400},                                       // the same through the http source
		{"POST", "/api/v1/ingest/cnt?input=web.out", strings.Repeat("y", 17<<20), 413}, // over the body bound
		// Over the event bound: a 16 MiB body of 8M one-byte lines took
		// about 1.6 GB in the app (100 times the body).
		{"POST", "/api/v1/ingest/cnt?input=web.out", strings.Repeat("y\n", httpapi.MaxIngestEvents+1), 413},
		{"POST", "/api/v1/ingest/cnt?input=web.out", `{"events": [` + strings.Repeat(`{"payload": "y"},`, httpapi.MaxIngestEvents) + `{"payload": "y"}]}`, 413},
		// A misspelled split was read as lines: two events taken, 200.
		{"POST", "/api/v1/ingest/cnt?input=web.out&split=Body", "a\nb\n", 400},
		{"POST", "/api/v1/ingest/web?split=bodies", "a\nb\n", 400},
		{"POST", "/api/v1/ingest/cnt?input=web.out", `{"events": [{"payload": 1}]}`, 400}, // with the JSON content type (below)
		{"POST", "/api/v1/ingest/cnt?input=web.out", `{"events": [{"payload": "a", "payload_base64": "YQ=="}]}`, 400},
		{"POST", "/api/v1/ingest/cnt?input=web.out", `{"events": [{"payload_base64": "!!"}]}`, 400},
		{"POST", "/api/v1/ingest/cnt?input=web.out", `{"events": [], "x": 1}`, 400},
		{"POST", "/api/v1/ingest/cnt?input=web.out", `{"events": [{}]}`, 400},
		// A line as long as the body bound used to be dropped unseen, and a
		// second JSON value ignored: both answered 200.
		{"POST", "/api/v1/ingest/cnt?input=web.out", strings.Repeat("y", 16<<20), 400},
		{"POST", "/api/v1/ingest/cnt?input=web.out", `{"events": [{"payload": "a"}]} {"events": [{"payload": "b"}]}`, 400},
	} {
		code, body := do(t, c.method, u+c.path, "", c.body)
		if code != c.code {
			b := string(body)
			if len(b) > 300 {
				b = b[:300]
			}
			t.Errorf("%s %s (%d bytes): %d %s, want %d", c.method, c.path, len(c.body), code, b, c.code)
			continue
		}
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
			t.Errorf("%s %s: body %q is not a JSON error", c.method, c.path, body)
		}
	}
}

// TestBadNumberNamesParameter: a bad count names its parameter (the
// answer used to say only "want a number >= 0").
func TestBadNumberNamesParameter(t *testing.T) {
	_, ts := startApp(t, httpapi.Config{})
	wantBadParam(t, ts.URL, map[string]string{
		"/api/v1/state/cnt/n?kind=counters&limit=-1": "limit",
		"/api/v1/queues/gen.out/tail?n=x":            "n",
		"/api/v1/dlq?limit=99999999999999999999":     "limit",
		"/api/v1/dlq/cnt?limit=-5":                   "limit",
	})
}

// TestStateParamsCheckedFirst: a state read's bad parameters are a 400
// naming the parameter whatever the table holds. They were read after the
// kind was guessed from the table's data, so on a table without data yet
// (a new app, a misspelled table) they answered 404 "no table with data";
// and a key given both as key and key_base64 read the first, unseen.
func TestStateParamsCheckedFirst(t *testing.T) {
	_, ts := startApp(t, httpapi.Config{})
	wantBadParam(t, ts.URL, map[string]string{
		"/api/v1/state/cnt/empty?limit=-1":                    "limit",
		"/api/v1/state/cnt/empty?key_base64=!!!":              "key_base64",
		"/api/v1/state/cnt/empty?prefix_base64=!!!":           "prefix_base64",
		"/api/v1/state/cnt/empty?start_base64=!!!":            "start_base64",
		"/api/v1/state/cnt/empty?key=a&key_base64=YQ==":       "key",
		"/api/v1/state/cnt/empty?prefix=a&prefix_base64=YQ==": "prefix",
		"/api/v1/state/cnt/empty?start=a&start_base64=YQ==":   "start",
		"/api/v1/state/cnt/n?key=a&key_base64=Yg==":           "key",
	})
}

// wantBadParam GETs each path and wants a 400 whose error begins with its
// parameter's name.
func wantBadParam(t *testing.T, base string, cases map[string]string) {
	t.Helper()
	for path, name := range cases {
		code, body := do(t, "GET", base+path, "", "")
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || code != 400 || !strings.HasPrefix(e.Error, name+": ") {
			t.Errorf("GET %s: %d %s, want 400 with an error beginning %q", path, code, body, name+": ")
		}
	}
}

// TestUIQueriesAccepted: every API request with a query that the web UI's
// script makes is one its endpoint takes (an endpoint answers 400 to a
// parameter it does not take, and the UI would show only the error).
func TestUIQueriesAccepted(t *testing.T) {
	_, ts := startApp(t, httpapi.Config{})
	code, js := do(t, "GET", ts.URL+"/ui/app.js", "", "")
	if code != 200 {
		t.Fatalf("GET /ui/app.js: %d", code)
	}
	calls := regexp.MustCompile(`api\("GET", "(/api/v1/[^"]*\?[^"]*)"\)`).FindAllSubmatch(js, -1)
	if len(calls) == 0 {
		t.Fatal(`no api("GET", "/api/v1/...?...") in the UI's script: this test no longer sees its requests`)
	}
	for _, c := range calls {
		if code, body := do(t, "GET", ts.URL+string(c[1]), "", ""); code != 200 {
			t.Errorf("the UI's GET %s: %d %s", c[1], code, body)
		}
	}
}
