package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/queue"
	"github.com/flowrun/flowrun/runtime"
	"github.com/flowrun/flowrun/runtime/metrics"
	"github.com/flowrun/flowrun/runtime/webui"
	"github.com/flowrun/flowrun/tx"
)

// DefaultAddr is where `flowrun run` listens unless --http says otherwise
// (port 0: any free port, written to the address file).
const DefaultAddr = "127.0.0.1:0"

// TokenEnv is the environment variable holding the bearer token.
const TokenEnv = "FLOWRUN_HTTP_TOKEN"

// ErrTokenRequired: a non-loopback address without a token.
var ErrTokenRequired = errors.New("listening on a non-loopback address requires a bearer token (--http-token or " + TokenEnv + ")")

// Config configures a Server.
type Config struct {
	// Addr to listen on (default DefaultAddr).
	Addr string
	// Token, when set, is required on every request. It must be set for a
	// non-loopback Addr.
	Token string
	// Pprof serves net/http/pprof under /debug/pprof/.
	Pprof bool
	// Logger for request errors (default: discard).
	Logger *slog.Logger
	// StatusMaxAge bounds how stale a served status may be (default
	// 500ms): App.Status reads every queue's keys, so concurrent pollers
	// share one.
	StatusMaxAge time.Duration
	// ScaleWait bounds how long a scale-down's answer waits for the removed
	// instances' steps in flight (default 2m); after it the answer is 202
	// and the scale-down completes once they are done.
	ScaleWait time.Duration
}

// Server serves one app.
type Server struct {
	a   *runtime.App
	cfg Config
	log *slog.Logger
	h   http.Handler

	ln  net.Listener
	srv *http.Server

	cookie string // the login cookie's value for Token

	stMu   sync.Mutex
	st     runtime.Status
	stTime time.Time
}

// IsLoopback reports whether a listen address binds only the loopback
// interface ("127.0.0.1:8080", "[::1]:0", "localhost:9000"). An empty host
// binds every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") { // host names are case-insensitive
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// MinTokenLen is the shortest bearer token the server accepts.
const MinTokenLen = 8

// CheckConfig refuses a non-loopback address without a token, and a token
// that guards nothing (blank, padded or shorter than MinTokenLen).
func CheckConfig(cfg Config) error {
	addr := cfg.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("http address %q: %w", addr, err)
	}
	if !IsLoopback(addr) && cfg.Token == "" {
		return fmt.Errorf("%w: %s", ErrTokenRequired, addr)
	}
	if err := CheckToken(cfg.Token); err != nil {
		return fmt.Errorf("http token: %w", err)
	}
	return nil
}

// CheckToken refuses a token that guards nothing: blank, padded or shorter
// than MinTokenLen. No token ("") is not its business (CheckConfig).
func CheckToken(token string) error {
	if token != "" && (strings.TrimSpace(token) != token || len(token) < MinTokenLen) {
		return fmt.Errorf("want at least %d characters without leading or trailing spaces (a blank or short token guards nothing)", MinTokenLen)
	}
	return nil
}

// New returns a server for a (not listening yet: see Start, or use Handler
// with httptest).
func New(a *runtime.App, cfg Config) (*Server, error) {
	if err := CheckConfig(cfg); err != nil {
		return nil, err
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StatusMaxAge <= 0 {
		cfg.StatusMaxAge = 500 * time.Millisecond
	}
	s := &Server{a: a, cfg: cfg, log: cfg.Logger}
	if cfg.Token != "" {
		// Not the token itself: a cookie value cannot hold every
		// character a token may have (';', '"', non-ASCII are dropped).
		sum := sha256.Sum256([]byte("flowrun cookie\x00" + cfg.Token))
		s.cookie = hex.EncodeToString(sum[:])
	}
	s.h = s.routes()
	return s, nil
}

// Handler is the server's handler, authentication included.
func (s *Server) Handler() http.Handler { return s.h }

// Start listens on the configured address and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// Addr is the address the server listens on (after Start).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// URL is the server's base URL (after Start). A server listening on every
// interface ("0.0.0.0", "[::]") is reached at 127.0.0.1 from this machine,
// which is what http.json's readers (status, top, scale) are on.
func (s *Server) URL() string {
	addr := s.Addr()
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	return "http://" + addr
}

// Close stops the server, waiting up to ctx for requests in flight.
func (s *Server) Close(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	return s.srv.Shutdown(ctx)
}

// status returns the app's status, at most StatusMaxAge old.
func (s *Server) status() runtime.Status {
	s.stMu.Lock()
	defer s.stMu.Unlock()
	if time.Since(s.stTime) >= s.cfg.StatusMaxAge {
		s.st = s.a.Status()
		s.stTime = time.Now()
	}
	return s.st
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "pong")
	})
	mux.HandleFunc("GET /ready", s.ready)
	mux.Handle("GET /metrics", metrics.Handler(metrics.Registry(s.a, s.status)))
	if s.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	// Each endpoint with the query parameters it reads.
	api := func(pattern string, h http.HandlerFunc, params ...string) {
		mux.Handle(pattern, knownParams(h, params))
	}
	api("GET /api/v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.status()) })
	api("POST /api/v1/flowlets/{flowlet}/scale", s.scale, "instances")
	api("POST /api/v1/flowlets/{flowlet}/pause", s.pause, "wait")
	api("POST /api/v1/flowlets/{flowlet}/resume", s.pause, "wait") // a 400 that names it
	api("GET /api/v1/state/{flowlet}", s.tables)
	api("GET /api/v1/state/{flowlet}/{table}", s.state, "key", "key_base64", "prefix", "prefix_base64", "start", "start_base64", "limit", "kind")
	api("GET /api/v1/queues", s.queues)
	api("GET /api/v1/queues/{queue}/tail", s.tail, "n", "partition", "from", "to", "since", "until")
	api("GET /api/v1/dlq", s.dlq, "limit")
	api("GET /api/v1/dlq/{flowlet}", s.dlq, "limit")
	api("POST /api/v1/dlq/{flowlet}/replay", s.replay)
	api("POST /api/v1/ingest/{flowlet}", s.ingest, "input", "split")
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		// A path that exists with another method is a 405, not a 404.
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "/api/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeErr(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: use %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
			return
		}
		writeErr(w, http.StatusNotFound, fmt.Errorf("no endpoint %s %s (see specs/http.md)", r.Method, r.URL.Path))
	})
	ui := webui.Handler()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// Outside /api/ everything is read-only (the UI, /ping, /ready,
		// /metrics): another method is a 405, whatever the path.
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, r.Method+" "+r.URL.Path+": method not allowed (use GET)", http.StatusMethodNotAllowed)
			return
		}
		ui.ServeHTTP(w, r)
	})
	return s.auth(parsedQuery(mux))
}

// knownParams answers 400 to a request with a query parameter the endpoint
// does not read: a misspelled one (partiton=3, limt=5) was ignored unseen,
// and the answer looked like what was asked for.
func knownParams(next http.Handler, params []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for name := range r.URL.Query() { // it parses: parsedQuery
			if !slices.Contains(params, name) {
				known := "none"
				if len(params) > 0 {
					known = strings.Join(params, ", ")
				}
				writeErr(w, http.StatusBadRequest, fmt.Errorf("unknown query parameter %q (%s %s takes: %s)", name, r.Method, r.URL.Path, known))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// parsedQuery answers 400 to an API request whose query does not parse (a
// bad %-escape, a ";"): r.URL.Query() drops such a parameter unseen, and a
// key lookup (key_base64=%zz) answered a scan of every key.
func parsedQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("query: %v", err))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

const cookieName = "flowrun_token"

// auth checks the token (or, without one, the Host and Origin headers).
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := s.cfg.Token; tok != "" {
			// The UI: "/?token=T" sets a cookie and redirects, so the token
			// leaves the address bar and the page's requests carry it.
			if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet && r.URL.Path == "/" && equal(q, tok) {
				http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.cookie, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
				http.Redirect(w, r, "/", http.StatusSeeOther)
				return
			}
			ok := false
			if scheme, cred, isAuth := strings.Cut(r.Header.Get("Authorization"), " "); isAuth && strings.EqualFold(scheme, "Bearer") { // case-insensitive (RFC 9110 §11.1)
				cred = strings.TrimSpace(cred)
				ok = cred != "" && equal(cred, tok)
			} else if c, err := r.Cookie(cookieName); err == nil {
				// The login's cookie, or the token itself set by hand.
				ok = c.Value != "" && (equal(c.Value, s.cookie) || equal(c.Value, tok))
			}
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="flowrun"`)
				writeErr(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
				return
			}
		} else if !loopbackHost(r.Host) {
			// A loopback server without a token answers only requests
			// addressed to a loopback name: a page on another site cannot
			// reach it through DNS rebinding.
			writeErr(w, http.StatusForbidden, fmt.Errorf("host %q not allowed (the server is bound to loopback without a token)", r.Host))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host && o != "https://"+r.Host {
				writeErr(w, http.StatusForbidden, fmt.Errorf("cross-origin request from %s refused", o))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// errorJSON is every error's body.
type errorJSON struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, errorJSON{Error: err.Error()})
}

// fail maps an error of the runtime to a status code.
func fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, runtime.ErrBadRequest), errors.Is(err, queue.ErrBadName), errors.Is(err, queue.ErrBadConfig), errors.Is(err, queue.ErrEventTooLarge):
		code = http.StatusBadRequest
	case errors.Is(err, runtime.ErrUnknownFlowlet), errors.Is(err, queue.ErrUnknownQueue), errors.Is(err, errNotFound):
		code = http.StatusNotFound
	case errors.Is(err, runtime.ErrNotScalable), errors.Is(err, runtime.ErrNotPaused), errors.Is(err, runtime.ErrScaleBusy):
		code = http.StatusConflict
	case errors.Is(err, runtime.ErrNotRunning), errors.Is(err, runtime.ErrNotCommitted):
		code = http.StatusServiceUnavailable
	case errors.Is(err, runtime.ErrPaused):
		// Back-pressure: an ingest into a paused source, to send again.
		code = http.StatusServiceUnavailable
		var pe *runtime.PausedError
		if errors.As(err, &pe) {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(pe.RetryAfter().Seconds()))))
		}
	case errors.Is(err, queue.ErrClosed), errors.Is(err, tx.ErrClosed), errors.Is(err, badger.ErrDBClosed), errors.Is(err, runtime.ErrStoreClosed):
		// A request still in flight when the app closed its store.
		code = http.StatusServiceUnavailable
		err = fmt.Errorf("%w: its store is closed (%v)", runtime.ErrNotRunning, err)
	}
	writeErr(w, code, err)
}

var errNotFound = errors.New("not found")
