package httpapi

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
)

// FuzzIngestBody reads any ingest body, as JSON, whole or by lines: no
// panic, and the events hold only what the body said.
//
//	go test ./runtime/httpapi -run '^$' -fuzz FuzzIngestBody -fuzztime 1m
func FuzzIngestBody(f *testing.F) {
	for _, s := range []string{"", "a\nb\r\n\n", `{"events": [{"payload": "a", "keys": {"k": "v", "j": ""}}, {"payload_base64": "YQ=="}]}`,
		`{"events": [{"payload": "a", "payload_base64": "YQ=="}]}`, `{"events": null}`, `{"events": [null]}`, `{"events": [{"payload": null}]}`,
		`{"events": [{"payload_base64": "!!"}]} x`, "{\"events\": [{\"payload\": \"\xff\"}]}"} {
		for _, ct := range []string{"", "application/json; charset=utf-8", "text/plain"} {
			f.Add(ct, "", []byte(s))
		}
		f.Add("", "body", []byte(s))
	}
	f.Fuzz(func(t *testing.T, ct, split string, body []byte) {
		evs, err := ingestEvents(ct, split, body)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		total := 0
		for _, e := range evs {
			total += len(e.Payload)
			for _, kv := range e.Keys {
				total += len(kv.Name) + len(kv.Value)
			}
		}
		if len(body) < total {
			t.Fatalf("%d bytes of events from a body of %d", total, len(body))
		}
	})
}

// FuzzQueryParams reads any query string as the handlers do: tail's
// selection, n and limit, state's key, prefix and start (the scan's
// cursor): no panic.
func FuzzQueryParams(f *testing.F) {
	for _, s := range []string{"", "partition=1,2&partition=3&from=3/0/1042.0.7&to=9&since=10m&until=2026-11-21T10:00:00Z",
		"partition=%20&from=/&to=.", "since=-1s", "until=9999999999h", "n=99999999999999999999", "limit=-0",
		"key=a&key_base64=YQ", "start_base64=YQ==&prefix_base64=%00", "start_base64=Y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.RawQuery = raw
		_, _ = queueSelect(r)
		q := r.URL.Query()
		for _, name := range []string{"n", "limit"} {
			if n, err := intParam(q, name, 10); err == nil && n < 0 {
				t.Fatalf("%s=%q: %d", name, q.Get(name), n)
			}
		}
		for _, name := range []string{"key", "prefix", "start"} {
			b, ok, err := bytesParam(q, name)
			if err == nil && ok && !bytes.Equal(b, []byte(q.Get(name))) && q.Get(name+"_base64") == "" {
				t.Fatalf("%s: %q from %q", name, b, raw)
			}
		}
		_, _ = url.ParseQuery(raw)
	})
}

// TestIngestJSONInvalidUTF8: a JSON ingest body that is not UTF-8 is
// refused: encoding/json took "\xff" in a payload or key as U+FFFD, so the
// event stored was not the bytes sent (binary goes as payload_base64). So
// is an escaped UTF-16 surrogate without its pair ("\udcff", what Python's
// json.dumps writes for a byte decoded with surrogateescape): it too was
// taken as U+FFFD.
func TestIngestJSONInvalidUTF8(t *testing.T) {
	for _, body := range []string{"{\"events\": [{\"payload\": \"a\xffb\"}]}", "{\"events\": [{\"payload\": \"a\", \"keys\": {\"k\": \"\xc3\"}}]}",
		`{"events": [{"payload": "a\udcffb"}]}`, `{"events": [{"payload": "a", "keys": {"k": "\uD800"}}]}`, `{"events": [{"payload": "\ud800\u0041"}]}`,
		`{"events": [{"payload": "\\\udfff"}]}`, `{"events": [{"payload": "\ud83d\ud83d\ude00"}]}`} {
		evs, err := ingestEvents("application/json", "", []byte(body))
		if err == nil || !strings.Contains(err.Error(), "payload_base64") {
			t.Errorf("%q: events %+v, error %v; want an error pointing to payload_base64", body, evs, err)
		}
	}
	// A pair is one character, an escaped backslash before "u" no escape.
	evs, err := ingestEvents("application/json", "", []byte(`{"events": [{"payload": "\ud83d\ude00 \\ud800 \ufffd", "keys": {"\\udc00": "\u00e9"}}]}`))
	if err != nil || len(evs) != 1 || string(evs[0].Payload) != "\U0001F600 \\ud800 \ufffd" || evs[0].Keys[0].Name != `\udc00` || evs[0].Keys[0].Value != "é" {
		t.Errorf("valid escapes: %+v, %v", evs, err)
	}
}

// TestIngestJSONEventCountBeforeDecoding: a JSON body of more than
// MaxIngestEvents events is refused as it is read, as a body of lines is:
// the count was checked once every event was decoded, so a 16 MiB body of
// {} (5.6M events) made the app allocate some 800 MB before its 413.
func TestIngestJSONEventCountBeforeDecoding(t *testing.T) {
	body := []byte(`{"events": [` + strings.Repeat(`{},`, maxIngestBody/3-8) + `{}]}`)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ingestEvents("application/json", "", body)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errTooManyEvents) {
		t.Fatalf("%d events: %v, want errTooManyEvents", maxIngestBody/3-7, err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8*maxIngestBody { // copies of the body
		t.Errorf("refusing a body of %d bytes allocated %d MiB", len(body), got>>20)
	}
	// MaxIngestEvents are taken, as before.
	body = []byte(`{"events": [` + strings.Repeat(`{"payload": "y"},`, MaxIngestEvents-1) + `{"payload": "y"}]}`)
	if evs, err := ingestEvents("application/json", "", body); err != nil || len(evs) != MaxIngestEvents {
		t.Errorf("%d events: %d taken, %v", MaxIngestEvents, len(evs), err)
	}
}
