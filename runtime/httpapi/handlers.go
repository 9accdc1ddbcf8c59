package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/builtin"
)

// Bytes is a key, value or payload in JSON: {"text": "..."} when it is
// valid UTF-8, {"base64": "..."} otherwise (as in the CLI's JSON).
type Bytes = runtime.Bytes

// ReadyJSON is the body of /ready.
type ReadyJSON struct {
	Ready   bool     `json:"ready"`
	Waiting []string `json:"waiting,omitempty"`
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ok, waiting := s.a.Ready()
	code := http.StatusOK
	if !ok {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, ReadyJSON{Ready: ok, Waiting: waiting})
}

// ScaleRequest is the body of POST /api/v1/flowlets/{flowlet}/scale.
type ScaleRequest struct {
	Instances int `json:"instances"`
}

// ScaleResponse answers it.
type ScaleResponse struct {
	Flowlet   string `json:"flowlet"`
	Previous  int    `json:"previous"`
	Instances int    `json:"instances"`
	// Pending (HTTP 202) says the scale-down still waits for the removed
	// instances' steps in flight (Config.ScaleWait ran out); it completes,
	// to Instances, once they are done.
	Pending string `json:"pending,omitempty"`
}

func (s *Server) scale(w http.ResponseWriter, r *http.Request) {
	fl := r.PathValue("flowlet")
	var req ScaleRequest
	if v := r.URL.Query().Get("instances"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("instances: %v", err))
			return
		}
		req.Instances = n
	} else if err := decodeOne(json.NewDecoder(io.LimitReader(r.Body, 1<<16)), &req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf(`body: want {"instances": N}: %v`, err))
		return
	}
	wait := s.cfg.ScaleWait
	if wait <= 0 {
		wait = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	prev, err := s.a.Scale(ctx, fl, req.Instances)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil && !errors.Is(err, runtime.ErrScaleBusy) {
		// The removed instances' steps in flight outlasted the wait; the
		// scale-down completes when they are done (App.Scale): accepted,
		// not failed.
		s.invalidate()
		writeJSON(w, http.StatusAccepted, ScaleResponse{Flowlet: fl, Previous: prev, Instances: req.Instances, Pending: err.Error()})
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	s.invalidate()
	writeJSON(w, 200, ScaleResponse{Flowlet: fl, Previous: prev, Instances: s.a.Instances(fl)})
}

// PauseResponse answers pause and resume.
type PauseResponse struct {
	Flowlet string `json:"flowlet"`
	Paused  bool   `json:"paused"`
	// Parked (pause only): no instance of the flowlet is in a step or
	// starts one until resumed (runtime.FlowletStatus.Parked), as of the
	// answer; with ?wait=D the answer waits up to D for it.
	Parked *bool `json:"parked,omitempty"`
}

// maxPauseWait bounds a pause's ?wait.
const maxPauseWait = 2 * time.Minute

func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	fl := r.PathValue("flowlet")
	pause := strings.HasSuffix(r.URL.Path, "/pause")
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case !pause:
			err = errors.New("only a pause waits")
		case err == nil && (d <= 0 || d > maxPauseWait):
			err = fmt.Errorf("want a duration in (0, %s], not %s", maxPauseWait, v)
		}
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("wait: %v", err))
			return
		}
		wait = d
	}
	var err error
	if pause {
		err = s.a.Pause(fl)
	} else {
		err = s.a.Resume(fl)
	}
	if err != nil {
		fail(w, err)
		return
	}
	resp := PauseResponse{Flowlet: fl, Paused: pause}
	if pause {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		err := s.a.WaitPaused(ctx, fl) // with no wait: where it stands
		ended := ctx.Err() != nil      // before cancel, which ends it
		cancel()
		if err != nil && !ended {
			fail(w, err) // resumed meanwhile (409)
			return
		}
		parked := err == nil
		resp.Parked = &parked
	}
	s.invalidate()
	writeJSON(w, 200, resp)
}

func (s *Server) invalidate() {
	s.stMu.Lock()
	s.stTime = time.Time{}
	s.stMu.Unlock()
}

func (s *Server) knownFlowlet(w http.ResponseWriter, fl string) bool {
	if s.a.Plan().Flowlet(fl) == nil {
		fail(w, fmt.Errorf("%w %q", runtime.ErrUnknownFlowlet, fl))
		return false
	}
	return true
}

func (s *Server) tables(w http.ResponseWriter, r *http.Request) {
	fl := r.PathValue("flowlet")
	if !s.knownFlowlet(w, fl) {
		return
	}
	ts, err := s.a.Inspect().Tables(s.a.Plan().App, fl)
	if err != nil {
		fail(w, err)
		return
	}
	if ts == nil {
		ts = []runtime.TableInfo{}
	}
	writeJSON(w, 200, ts)
}

// StateEntry is one key of a table (Value) or counter table (Count).
type StateEntry = runtime.StateEntry

// StateTable is a scan of one table.
type StateTable = runtime.StateTable

// state: with key (or key_base64) one entry, 404 when a table has no such
// key; otherwise a scan (prefix, limit).
func (s *Server) state(w http.ResponseWriter, r *http.Request) {
	fl, table := r.PathValue("flowlet"), r.PathValue("table")
	if !s.knownFlowlet(w, fl) {
		return
	}
	q := r.URL.Query()
	// The parameters first: a bad one is a 400 whatever the table holds
	// (after the kind's guess, a table without data yet answered 404).
	key, hasKey, err := bytesParam(q, "key")
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	prefix, _, err := bytesParam(q, "prefix")
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	start, _, err := bytesParam(q, "start")
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	limit, err := intParam(q, "limit", 1000)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	kind := q.Get("kind")
	if kind == "" {
		if kind, err = s.a.Inspect().TableKind(s.a.Plan().App, fl, table); err != nil {
			fail(w, err)
			return
		}
		if kind == "" {
			fail(w, fmt.Errorf("%w: flowlet %q has no table %q with data (pass kind=table or kind=counters to read an empty one)", errNotFound, fl, table))
			return
		}
	}
	if kind != "table" && kind != "counters" {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("kind must be table or counters, not %q", kind))
		return
	}
	t := runtime.TableInfo{Name: table, Kind: kind}
	out := StateTable{Name: table, Kind: kind, Entries: []StateEntry{}}
	found := true
	err = s.a.View(fl, func(st runtime.StateReader) error {
		if hasKey {
			e, ok, err := runtime.GetStateEntry(st, t, key)
			if ok {
				out.Entries = append(out.Entries, e)
			}
			found = ok
			return err
		}
		var err error
		out, err = runtime.ScanStateTableBounded(st, t, flowlet.ScanOptions{Prefix: prefix, Start: start, Limit: limit}, runtime.MaxListBytes)
		return err
	})
	if err != nil {
		fail(w, err)
		return
	}
	if !found {
		fail(w, fmt.Errorf("%w: table %q of flowlet %q has no key %q", errNotFound, table, fl, key))
		return
	}
	markTruncated(w, out.Truncated)
	writeJSON(w, 200, out)
}

// bytesParam reads a byte string given as name (text) or name_base64;
// both is a 400 (one of them was ignored unseen).
func bytesParam(q map[string][]string, name string) ([]byte, bool, error) {
	if len(q[name]) > 0 && len(q[name+"_base64"]) > 0 {
		return nil, false, fmt.Errorf("%s: give %s or %s_base64, not both", name, name, name)
	}
	if v, ok := q[name]; ok && len(v) > 0 {
		return []byte(v[0]), true, nil
	}
	if v, ok := q[name+"_base64"]; ok && len(v) > 0 {
		b, err := base64.StdEncoding.DecodeString(v[0])
		if err != nil {
			return nil, false, fmt.Errorf("%s_base64: %v", name, err)
		}
		return b, true, nil
	}
	return nil, false, nil
}

// intParam reads the count parameter name of q (def when absent); its
// error names it.
func intParam(q url.Values, name string, def int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: want a number >= 0, got %q", name, v)
	}
	return n, nil
}

// QueueJSON is one queue in GET /api/v1/queues (as `flowrun queue ls --json`).
type QueueJSON = runtime.QueueJSON

// GroupJSON is one consumer group of a queue.
type GroupJSON = runtime.GroupJSON

func (s *Server) queues(w http.ResponseWriter, r *http.Request) {
	out, err := s.a.Inspect().QueueList()
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, 200, out)
}

// EntryJSON is one stored queue entry (as `flowrun queue tail --json`).
type EntryJSON = runtime.EntryJSON

// maxTailScan bounds the entries a tail reads (it keeps the newest n).
const maxTailScan = 200000

func (s *Server) tail(w http.ResponseWriter, r *http.Request) {
	qn := r.PathValue("queue")
	n, err := intParam(r.URL.Query(), "n", 10)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	// A tail reads at most maxTailScan entries: a larger n is the same
	// tail (and one above MaxInt/2 wrapped TailBounded's 2n: a panic).
	n = min(n, maxTailScan)
	key := ""
	if q := s.a.Plan().Queue(qn); q != nil {
		key = q.Key
	}
	sel, err := queueSelect(r)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	out, truncated, err := s.a.Inspect().TailBounded(qn, key, n, maxTailScan, runtime.MaxListBytes, sel)
	if err != nil {
		fail(w, err)
		return
	}
	markTruncated(w, truncated)
	writeJSON(w, 200, out)
}

// DeadLetterJSON is one dead letter (as `flowrun dlq ls --json`).
type DeadLetterJSON = runtime.DeadLetterJSON

func (s *Server) dlq(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r.URL.Query(), "limit", 100)
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	var fls []string
	if fl := r.PathValue("flowlet"); fl != "" {
		if !s.knownFlowlet(w, fl) {
			return
		}
		fls = []string{fl}
	} else {
		for _, f := range s.a.Plan().Flowlets {
			fls = append(fls, f.Name)
		}
	}
	out, truncated, err := s.a.Inspect().DeadLetterListBounded(fls, limit, runtime.MaxListBytes)
	if err != nil {
		fail(w, err)
		return
	}
	markTruncated(w, truncated)
	writeJSON(w, 200, out)
}

// TruncatedHeader is set ("true") on a tail, dead-letter or state answer
// that stopped at runtime.MaxListBytes before its n or limit.
const TruncatedHeader = "Flowrun-Truncated"

func markTruncated(w http.ResponseWriter, truncated bool) {
	if truncated {
		w.Header().Set(TruncatedHeader, "true")
	}
}

// ReplayResponse answers POST /api/v1/dlq/{flowlet}/replay.
type ReplayResponse struct {
	Replayed int `json:"replayed"`
	Kept     int `json:"kept"`
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	fl := r.PathValue("flowlet")
	if !s.knownFlowlet(w, fl) {
		return
	}
	f := s.a.Plan().Flowlet(fl)
	inputs := map[string]string{}
	for _, q := range f.Inputs {
		inputs[q] = s.a.Plan().Queue(q).Key
	}
	if len(inputs) == 0 {
		fail(w, fmt.Errorf("%w: flowlet %q consumes no input: its dead letters cannot be replayed", runtime.ErrBadRequest, fl))
		return
	}
	rep, kept, err := s.a.Inspect().ReplayDeadLetters(fl, inputs)
	if err != nil {
		fail(w, err)
		return
	}
	s.invalidate()
	writeJSON(w, 200, ReplayResponse{Replayed: rep, Kept: kept})
}

// IngestRequest is the JSON body of POST /api/v1/ingest/{flowlet}.
type IngestRequest struct {
	Events []IngestEventJSON `json:"events"`
}

// IngestEventJSON is one event: payload as text or base64, optional keys.
type IngestEventJSON struct {
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	Keys          map[string]string `json:"keys,omitempty"`
}

// IngestResponse answers an ingest.
type IngestResponse struct {
	Accepted int `json:"accepted"`
}

// maxIngestBody bounds an ingest request.
const maxIngestBody = 16 << 20

// MaxIngestEvents bounds the events of an ingest request: each costs the
// app about 200 bytes more than its payload (envelope, queue entry, the
// transaction's writes), so 16 MiB of one-byte lines took about 1.6 GB.
// An ingest goes to an http_source: the bound of a request to its own
// endpoint.
const MaxIngestEvents = builtin.MaxRequestEvents

// errTooManyEvents is an ingest body of more than MaxIngestEvents events.
var errTooManyEvents = fmt.Errorf("more than %d events in one request: send them in several", MaxIngestEvents)

func (s *Server) ingest(w http.ResponseWriter, r *http.Request) {
	fl := r.PathValue("flowlet")
	if !s.knownFlowlet(w, fl) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxIngestBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("body larger than %d bytes", maxIngestBody))
			return
		}
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	evs, err := ingestEvents(r.Header.Get("Content-Type"), r.URL.Query().Get("split"), body)
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, errTooManyEvents) {
			code = http.StatusRequestEntityTooLarge
		}
		writeErr(w, code, err)
		return
	}
	n, err := s.a.Ingest(r.Context(), fl, r.URL.Query().Get("input"), evs)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, 200, IngestResponse{Accepted: n})
}

// ingestEvents reads an ingest body: a JSON IngestRequest (Content-Type
// application/json), the whole body as one event (split=body), or one
// event a line. Its error is the client's (400).
func ingestEvents(contentType, split string, body []byte) ([]runtime.IngestEvent, error) {
	var evs []runtime.IngestEvent
	var err error
	ct, _, _ := mime.ParseMediaType(contentType) // lower-cased
	if split != "" && split != "lines" && split != "body" {
		// A misspelled split (Body) was read as lines, unseen.
		return nil, fmt.Errorf("split: want lines or body, not %q", split)
	}
	switch {
	case ct == "application/json":
		if !utf8.Valid(body) {
			// encoding/json would take each bad byte as U+FFFD: the
			// events stored would not be the bytes sent.
			return nil, errors.New("body: not valid UTF-8, which JSON text is: send binary payloads as payload_base64")
		}
		var req ingestRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := decodeOne(dec, &req); errors.Is(err, errTooManyEvents) {
			return nil, err
		} else if err != nil {
			return nil, fmt.Errorf("body: %v", err)
		}
		if loneSurrogate(body) {
			// encoding/json takes it as U+FFFD too.
			return nil, errors.New(`body: a \u escape of a UTF-16 surrogate without its pair, which is no character: send binary payloads as payload_base64`)
		}
		for i, e := range req.Events {
			var ev runtime.IngestEvent
			switch {
			case e.Payload != nil && e.PayloadBase64 == nil:
				ev.Payload = []byte(*e.Payload)
			case e.PayloadBase64 != nil && e.Payload == nil:
				if ev.Payload, err = base64.StdEncoding.DecodeString(*e.PayloadBase64); err != nil {
					return nil, fmt.Errorf("event %d: payload_base64: %v", i, err)
				}
			default:
				return nil, fmt.Errorf("event %d: give exactly one of payload and payload_base64", i)
			}
			names := make([]string, 0, len(e.Keys))
			for k := range e.Keys {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				ev.Keys = append(ev.Keys, flowlet.KeyValue{Name: k, Value: e.Keys[k]})
			}
			evs = append(evs, ev)
		}
	case split == "body":
		if len(body) > 0 {
			evs = append(evs, runtime.IngestEvent{Payload: body})
		}
	default:
		// Not a bufio.Scanner: its token bound dropped a line as long as
		// the body, unseen.
		for l := range bytes.Lines(body) {
			l = bytes.TrimSuffix(bytes.TrimSuffix(l, []byte("\n")), []byte("\r"))
			if len(l) > 0 {
				if len(evs) == MaxIngestEvents {
					return nil, errTooManyEvents
				}
				evs = append(evs, runtime.IngestEvent{Payload: l})
			}
		}
	}
	return evs, nil
}

// ingestRequest is IngestRequest as read: its events counted as they are
// decoded.
type ingestRequest struct {
	Events ingestList `json:"events"`
}

// ingestList is IngestRequest's events, decoded one by one: more than
// MaxIngestEvents is errTooManyEvents at the one past it (decoded whole,
// 16 MiB of {} made 5.6M events, some 800 MB, before the count).
type ingestList []IngestEventJSON

func (l *ingestList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*l = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		kind := map[byte]string{'{': "object", '"': "string", 't': "bool", 'f': "bool"}[b[0]]
		if kind == "" {
			kind = "number"
		}
		return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeFor[[]IngestEventJSON]()} // the field is named by the caller
	}
	*l = (*l)[:0]
	for dec.More() {
		if len(*l) == MaxIngestEvents {
			return errTooManyEvents
		}
		var e IngestEventJSON
		if err := dec.Decode(&e); err != nil {
			return err
		}
		*l = append(*l, e)
	}
	return nil
}

// loneSurrogate reports whether the JSON text body (valid: a backslash is
// in a string) has a \u escape of a UTF-16 surrogate that is not half of
// a pair (a high one followed by an escaped low one).
func loneSurrogate(body []byte) bool {
	hex := func(i int) rune { // the \u escape at i, -1 if none
		if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
			return -1
		}
		r, err := strconv.ParseUint(string(body[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(r)
	}
	for i := 0; i < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		r := hex(i)
		switch {
		case r < 0:
			i++ // \\, \", \n …: skip the escaped character
		case utf16.IsSurrogate(r):
			if r >= 0xdc00 || !isLow(hex(i+6)) {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

func isLow(r rune) bool { return r >= 0xdc00 && r <= 0xdfff }

// decodeOne decodes the one JSON value of a body into v and refuses
// anything after it: a second value used to be ignored (a second batch of
// events dropped while the answer said accepted).
func decodeOne(dec *json.Decoder, v any) error {
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more data after the JSON value")
	}
	return nil
}

// queueSelect reads tail's selection: partition (repeated or
// comma-separated), from, to (entry ids or write pointers), since, until
// (RFC 3339 or a duration ago).
func queueSelect(r *http.Request) (runtime.QueueSelect, error) {
	q := r.URL.Query()
	var sel runtime.QueueSelect
	for _, v := range q["partition"] {
		for _, p := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(p))
			if err != nil {
				return sel, fmt.Errorf("partition: want a number, not %q", p)
			}
			sel.Partitions = append(sel.Partitions, n)
		}
	}
	var err error
	if sel.From, err = runtime.ParsePointer(q.Get("from")); err != nil {
		return sel, fmt.Errorf("from: %w", err)
	}
	if sel.To, err = runtime.ParseUpperPointer(q.Get("to")); err != nil {
		return sel, fmt.Errorf("to: %w", err)
	}
	now := time.Now()
	if sel.Since, err = runtime.ParseInstant(q.Get("since"), now); err != nil {
		return sel, fmt.Errorf("since: %w", err)
	}
	if sel.Until, err = runtime.ParseInstant(q.Get("until"), now); err != nil {
		return sel, fmt.Errorf("until: %w", err)
	}
	return sel, nil
}
