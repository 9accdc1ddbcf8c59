package runtime_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// The JSON of dlq ls --json, queue tail --json and the HTTP API
// (specs/cli.md, specs/http.md).
func TestInspectJSONFormats(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	d := runtime.DeadLetter{Flowlet: "parser", Input: "reader.out", EventID: "5/0/88.0.3", Error: "malformed line", Attempts: 1,
		Time: at, Keys: []flowlet.KeyValue{{Name: "ip", Value: "1.2.3.4"}}, EventTime: at, TraceID: "t1", Payload: []byte("garbage")}
	for _, c := range []struct {
		v    any
		want string
	}{
		{runtime.DeadLetterJSON{DeadLetter: d, Payload: runtime.NewBytes(d.Payload)},
			`{"flowlet":"parser","input":"reader.out","event_id":"5/0/88.0.3","error":"malformed line","attempts":1,"time":"2026-11-21T10:00:00Z","keys":{"ip":"1.2.3.4"},"event_time":"2026-11-21T10:00:00Z","trace_id":"t1","payload":{"text":"garbage"}}`},
		{runtime.DeadLetterJSON{DeadLetter: runtime.DeadLetter{Flowlet: "p", Time: at}, Payload: runtime.NewBytes([]byte{0xff})},
			`{"flowlet":"p","input":"","event_id":"","error":"","attempts":0,"time":"2026-11-21T10:00:00Z","payload":{"base64":"/w=="}}`},
		{runtime.EntryJSON{ID: "3/0/1042.0.7", Enqueued: at, Payload: runtime.NewBytes([]byte("x"))},
			`{"id":"3/0/1042.0.7","enqueued":"2026-11-21T10:00:00Z","payload":{"text":"x"}}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("got %s (%v)\nwant %s", b, err, c.want)
		}
	}
	// An event time with a year past 9999 (queues and dead letters keep
	// it) failed the whole listing: time.Time writes four-digit years only.
	far := time.Date(10000, 1, 2, 3, 4, 5, 6, time.UTC)
	d.EventTime = far
	for _, v := range []any{
		[]runtime.DeadLetterJSON{{DeadLetter: d, Payload: runtime.NewBytes(d.Payload)}},
		[]runtime.EntryJSON{{ID: "3/0/1042.0.7", Enqueued: at, EventTime: &far, Payload: runtime.NewBytes([]byte("x"))}},
	} {
		b, err := json.Marshal(v)
		if err != nil || !strings.Contains(string(b), `"event_time":"10000-01-02T03:04:05.000000006Z"`) || !strings.Contains(string(b), `"payload":{"text":`) {
			t.Errorf("a time in year 10000: %s (%v)", b, err)
		}
	}
	var back runtime.DeadLetterJSON
	if err := json.Unmarshal([]byte(`{"flowlet":"p","payload":{"base64":"/w=="}}`), &back); err != nil ||
		back.Flowlet != "p" || string(back.Payload.Raw()) != "\xff" {
		t.Errorf("decoded %+v (%v)", back, err)
	}
}

// Keys are an object of name to value, the shape ingest takes, both ways.
func TestKeyListJSON(t *testing.T) {
	in := runtime.KeyList{{Name: "path", Value: "/a"}, {Name: "ip", Value: "1.2.3.4"}}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"path":"/a","ip":"1.2.3.4"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var out runtime.KeyList
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != in[1] || out[1] != in[0] {
		t.Fatalf("unmarshal: %+v, want the keys sorted by name", out)
	}
	if b, _ := json.Marshal(runtime.KeyList(nil)); string(b) != "{}" {
		t.Errorf("no keys: %s", b)
	}
}
