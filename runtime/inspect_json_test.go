package runtime_test

import (
	"encoding/json"
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
			`{"flowlet":"parser","input":"reader.out","event_id":"5/0/88.0.3","error":"malformed line","attempts":1,"time":"2026-11-21T10:00:00Z","keys":[{"Name":"ip","Value":"1.2.3.4"}],"event_time":"2026-11-21T10:00:00Z","trace_id":"t1","payload":{"text":"garbage"}}`},
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
	var back runtime.DeadLetterJSON
	if err := json.Unmarshal([]byte(`{"flowlet":"p","payload":{"base64":"/w=="}}`), &back); err != nil ||
		back.Flowlet != "p" || string(back.Payload.Raw()) != "\xff" {
		t.Errorf("decoded %+v (%v)", back, err)
	}
}
