package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flowrun/flowrun/flowlet"
)

func init() {
	flowlet.Register("http_source", func() flowlet.Flowlet { return &HTTPSource{} }, flowlet.TypeInfo{
		Source: true, SingleInstance: true, Outputs: []string{"out"},
		Doc: "ingest endpoint: POST bodies become events; answers 200 only after the commit",
	})
}

// HTTPSource serves an ingest endpoint (default 127.0.0.1:8080, path "/";
// exactly that path: other paths answer 404). It has no token: an address
// without a host (":8080") is refused, every interface must be written out
// (0.0.0.0:8080).
// A POST body is split into events (split: lines, the default: one event per
// non-empty line; split: body: the whole body is one event). The handler
// answers 200 {"accepted": n} only after the step that emitted the body's
// events committed; 503 if the app or the source (after its retries) stops
// first, 413 when the body or a line is too large; 503 with Retry-After at
// once while the source is paused (the runtime's RefuseIngest). All events
// of one request commit in one step. A step too large or too slow is redone
// with half its requests (runtime.StepSplitter); a request whose step fails
// alone is answered 503 (413 if too large) and the source goes on.
type HTTPSource struct {
	addr    string
	path    string
	split   string
	maxBody int64
	name    string

	ln  net.Listener
	srv *http.Server

	mu       sync.Mutex
	pending  []*ingest
	inflight []*ingest
	closed   bool
	// refuse, while set (RefuseIngest: the source is paused, or the app
	// stops), answers every ingest not in a step.
	refuse error
	ready  chan struct{}

	// After a step too large or too slow (SplitStep): limit bounds the
	// requests a step takes (no limit: maxStepEvents); aborted is the last
	// aborted step's requests, in pending again.
	limit   stepLimit
	aborted []*ingest
}

type ingest struct {
	events [][]byte
	done   chan error
}

// maxEvent keeps an event with its envelope under the queues' 1 MiB limit.
const maxEvent = 1 << 20

// maxStepEvents bounds a step's events, but for its first request's.
const maxStepEvents = 10000

// CheckConfig implements flowlet.ConfigChecker.
func (s *HTTPSource) CheckConfig(ic flowlet.InitContext) error { return s.configure(ic) }

func (s *HTTPSource) Init(ic flowlet.InitContext) error {
	if err := s.configure(ic); err != nil {
		return err
	}
	s.name = ic.Name
	s.ready = make(chan struct{}, 1)
	var err error
	s.ln, err = net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("http_source %q: listen on %s: %w", ic.Name, s.addr, err)
	}
	mux := http.NewServeMux()
	// Exactly the configured path: a pattern ending in "/" would take
	// every path below it ("/" every path at all).
	pattern := s.path
	if strings.HasSuffix(pattern, "/") {
		pattern += "{$}"
	}
	mux.HandleFunc(pattern, s.handle)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(s.ln)
	ic.Logger.Info("http_source listening", "addr", s.ln.Addr().String(), "path", s.path)
	return nil
}

func (s *HTTPSource) configure(ic flowlet.InitContext) error {
	c := ic.Config
	if err := c.Known("addr", "path", "split", "max_body_bytes"); err != nil {
		return err
	}
	var err error
	if s.addr, err = c.String("addr", "127.0.0.1:8080"); err != nil {
		return err
	}
	if s.path, err = c.String("path", "/"); err != nil {
		return err
	}
	if s.split, err = c.String("split", "lines"); err != nil {
		return err
	}
	mb, err := c.Int("max_body_bytes", 8<<20)
	if err != nil {
		return err
	}
	s.maxBody = int64(mb)
	if mb < 1 {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "max_body_bytes", Msg: fmt.Sprintf("must be at least 1, got %d", mb)}
	}
	if !strings.HasPrefix(s.path, "/") || strings.ContainsAny(s.path, "{} \t?#") || cleanPath(s.path) != s.path {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "path", Msg: fmt.Sprintf("want a clean URL path such as /ingest (starting with /; no //, /./ or /../; no {, }, ?, # or spaces), got %q", s.path)}
	}
	// The runtime's rule for its own HTTP address (planner.CheckListenAddr):
	// every interface only when written out, never by an empty host — the
	// endpoint has no token to guard it.
	if host, _, err := net.SplitHostPort(s.addr); err != nil {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "addr", Msg: fmt.Sprintf("want host:port (127.0.0.1:8080), got %q", s.addr)}
	} else if host == "" {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "addr", Msg: fmt.Sprintf("%q has no host, which listens on every interface: write 127.0.0.1%s to stay on this machine, or 0.0.0.0%s (or [::]%s) to listen on every interface explicitly", s.addr, s.addr, s.addr, s.addr)}
	}
	if s.split != "lines" && s.split != "body" {
		return &flowlet.ConfigError{Flowlet: ic.Name, Field: "split", Msg: fmt.Sprintf("want lines or body, got %q", s.split)}
	}
	return nil
}

// cleanPath is p as ServeMux serves it: requests for an unclean path
// ("/a//b", "/a/./b") are redirected to the clean one, so an unclean
// configured path could never be reached.
func cleanPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// Addr is the address the endpoint listens on.
func (s *HTTPSource) Addr() string { return s.ln.Addr().String() }

// MaxRequestEvents bounds the events (lines) of one request, and of one
// ingest through the HTTP API (httpapi.MaxIngestEvents is this): each costs
// the source memory before its step, and a large max_body_bytes of short
// lines made millions of them, to be refused as too large for one step only
// after.
const MaxRequestEvents = 100000

func (s *HTTPSource) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST events to this endpoint", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			http.Error(w, fmt.Sprintf("body larger than max_body_bytes (%d)", s.maxBody), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var evs [][]byte
	if s.split == "body" {
		if len(body) > 0 {
			evs = append(evs, body)
		}
	} else {
		for rest := body; len(rest) > 0; {
			l := rest
			if i := bytes.IndexByte(rest, '\n'); i >= 0 {
				l, rest = rest[:i], rest[i+1:]
			} else {
				rest = nil
			}
			l = bytes.TrimSuffix(l, []byte("\r"))
			if len(l) == 0 {
				continue
			}
			if len(evs) == MaxRequestEvents {
				http.Error(w, fmt.Sprintf("more than %d events in one request: send them in several", MaxRequestEvents), http.StatusRequestEntityTooLarge)
				return
			}
			evs = append(evs, l)
		}
	}
	for _, e := range evs {
		if len(e) > maxEvent {
			http.Error(w, fmt.Sprintf("an event of %d bytes exceeds the limit of %d bytes", len(e), maxEvent), http.StatusRequestEntityTooLarge)
			return
		}
	}
	if len(evs) > 0 {
		if err := s.Ingest(r.Context(), evs); err != nil {
			if r.Context().Err() != nil {
				return // client gone; the events may still commit
			}
			var ra interface{ RetryAfter() time.Duration }
			if errors.As(err, &ra) {
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ra.RetryAfter().Seconds()))))
			}
			code := http.StatusServiceUnavailable
			var de *droppedError
			var ue *unknownOutcomeError
			switch {
			case errors.As(err, &de) && flowlet.IsPermanent(err):
				code = http.StatusRequestEntityTooLarge // too large for one step: send fewer events
			case errors.As(err, &ue):
				code = http.StatusInternalServerError // not 503: that says not committed
			}
			http.Error(w, err.Error(), code)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]int{"accepted": len(evs)})
}

// errClosed: the source closed before the events committed — the app
// stops, or the source stopped after its retries (the runtime closes a
// source that stopped while the app runs on).
var errClosed = errors.New("the source has stopped (flowrun is shutting down, or the source gave up: see its log); the events were not committed, send them again")

// Ingest implements runtime.Ingester: the events commit in one step, and
// Ingest returns after that commit (nil), when ctx ends (ctx.Err(); the
// events may still commit) or when the source closes first.
func (s *HTTPSource) Ingest(ctx context.Context, evs [][]byte) error {
	if len(evs) == 0 {
		return nil
	}
	for _, e := range evs {
		if len(e) > maxEvent {
			return fmt.Errorf("an event of %d bytes exceeds the limit of %d bytes", len(e), maxEvent)
		}
	}
	in := &ingest{events: evs, done: make(chan error, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosed
	}
	if err := s.refuse; err != nil {
		s.mu.Unlock()
		return err
	}
	s.pending = append(s.pending, in)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	select {
	case err := <-in.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Waiting is the number of requests waiting for a step (not in one).
func (s *HTTPSource) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Ready implements runtime.Waker.
func (s *HTTPSource) Ready() <-chan struct{} { return s.ready }

func (s *HTTPSource) Generate(ctx flowlet.Context) error {
	s.mu.Lock()
	n := 0
	i := 0
	for ; i < len(s.pending) && (i == 0 || n+len(s.pending[i].events) <= maxStepEvents && i < s.limit.of(len(s.pending))); i++ {
		n += len(s.pending[i].events)
	}
	s.inflight = append(s.inflight[:0], s.pending[:i]...)
	s.pending = s.pending[i:]
	s.mu.Unlock()
	if len(s.inflight) == 0 {
		return flowlet.ErrIdle
	}
	for _, in := range s.inflight {
		for _, e := range in.events {
			if err := ctx.Emit("out", e); err != nil {
				return err
			}
		}
	}
	t := ctx.State(posTable)
	c, err := getU64(t, posKey)
	if err != nil {
		return err
	}
	return putU64(t, posKey, c+uint64(n))
}

// Committed implements runtime.StepObserver: acknowledge the requests.
func (s *HTTPSource) Committed() {
	for _, in := range s.inflight {
		in.done <- nil
	}
	clear(s.aborted)
	s.aborted = s.aborted[:0]
	if len(s.inflight) > 0 {
		s.limit.committed(maxStepEvents + 1) // every request has an event
	}
	s.inflight = s.inflight[:0]
}

// SplitStep implements runtime.StepSplitter: the step just aborted was too
// large or too slow; the next takes half its requests, if it had several.
func (s *HTTPSource) SplitStep() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit.split(len(s.aborted))
}

// DropStep implements runtime.StepSplitter: the request of the step just
// aborted, too large or too slow on its own, is answered err (413 when it
// is permanent: too large) instead of being taken again.
func (s *HTTPSource) DropStep(err error) {
	s.mu.Lock()
	var drop *ingest
	if len(s.aborted) == 1 {
		if i := slices.Index(s.pending, s.aborted[0]); i >= 0 {
			drop = s.pending[i]
			s.pending = slices.Delete(s.pending, i, i+1)
		}
	}
	s.mu.Unlock()
	if drop != nil {
		drop.done <- &droppedError{err}
	}
}

// OutcomeUnknown implements runtime.OutcomeObserver: the commit of the
// step's requests failed with the commit log, so they may or may not have
// committed; they are answered so (a client told "not committed" would send
// them again and might count them twice).
func (s *HTTPSource) OutcomeUnknown(err error) {
	s.mu.Lock()
	s.aborted = s.aborted[:0]
	s.mu.Unlock()
	s.endInflight(&unknownOutcomeError{err})
}

// unknownOutcomeError: a request whose step's commit failed with the log.
type unknownOutcomeError struct{ err error }

func (e *unknownOutcomeError) Error() string {
	return "the commit log failed while these events committed: they may or may not have been committed; check before sending them again (" + e.err.Error() + ")"
}

func (e *unknownOutcomeError) Unwrap() error { return e.err }

// OutcomeUnknown tells the runtime (App.Ingest) what this error is.
func (e *unknownOutcomeError) OutcomeUnknown() bool { return true }

// droppedError: a request the source gave up, its events not committed.
type droppedError struct{ err error }

func (e *droppedError) Error() string {
	return "the request's events were not committed: its step fails alone (" + e.err.Error() + ")"
}

func (e *droppedError) Unwrap() error { return e.err }

// Aborted implements runtime.StepObserver: the requests wait for the retry,
// unless ingests are refused (RefuseIngest): then no step may come for
// them, and they are answered now.
func (s *HTTPSource) Aborted() {
	s.mu.Lock()
	refuse := s.refuse
	s.aborted = append(s.aborted[:0], s.inflight...)
	if refuse == nil {
		s.pending = append(append([]*ingest(nil), s.inflight...), s.pending...)
	}
	s.mu.Unlock()
	s.endInflight(refuse)
}

// endInflight ends the step's requests, answering each answer unless nil
// (they wait for another step then).
func (s *HTTPSource) endInflight(answer error) {
	if answer != nil {
		for _, in := range s.inflight {
			in.done <- answer
		}
	}
	clear(s.inflight)
	s.inflight = s.inflight[:0]
}

// RefuseIngest implements runtime.IngestRefuser: with err, the requests
// waiting (not in a step) are answered err at once, and later ones too,
// until RefuseIngest(nil). The runtime refuses while the source is paused
// and once the app begins to stop.
func (s *HTTPSource) RefuseIngest(err error) {
	s.mu.Lock()
	s.refuse = err
	var refused []*ingest
	if err != nil {
		refused, s.pending = s.pending, nil
	}
	s.mu.Unlock()
	for _, in := range refused {
		in.done <- err
	}
}

func (s *HTTPSource) Close() error {
	s.mu.Lock()
	s.closed = true
	pending := append(s.pending, s.inflight...)
	s.pending, s.inflight = nil, nil
	s.mu.Unlock()
	for _, in := range pending {
		in.done <- errClosed
	}
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}
