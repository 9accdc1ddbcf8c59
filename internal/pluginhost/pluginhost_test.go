package pluginhost_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
	"github.com/flowrun/flowrun/flowlet/plugin"
	"github.com/flowrun/flowrun/internal/pluginhost"
)

// cacheDir is shared by the package's tests, so each test plugin is built
// once per run.
var cacheDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "pluginhost-test-")
	if err != nil {
		panic(err)
	}
	cacheDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// logBuf is a concurrency-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func options(t testing.TB, logs *logBuf) pluginhost.Options {
	o := pluginhost.Options{CacheDir: cacheDir, CallTimeout: 20 * time.Second, RestartBackoff: time.Millisecond}
	if logs != nil {
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

func open(t testing.TB, name, path string, o pluginhost.Options) *pluginhost.Plugin {
	t.Helper()
	p, err := pluginhost.Open(context.Background(), name, path, "testdata", o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func pid(f flowlet.Flowlet) int { return f.(interface{ PID() int }).PID() }

func transport(f flowlet.Flowlet) string { return f.(interface{ Transport() string }).Transport() }

func ev(payload string) flowlet.Event { return flowlettest.Event(payload) }

func TestRoundTrip(t *testing.T) {
	logs := &logBuf{}
	p := open(t, "upper", "testplugin", options(t, logs))
	if p.Info().Doc != "pluginhost test flowlet" {
		t.Errorf("info: %+v", p.Info())
	}
	f := p.Type().New()
	if _, ok := f.(flowlet.BatchProcessor); !ok {
		t.Fatalf("%T is not a BatchProcessor", f)
	}
	if _, ok := f.(flowlet.Ticker); !ok {
		t.Fatalf("%T is not a Ticker", f)
	}
	if _, ok := f.(flowlet.Source); ok {
		t.Fatalf("%T is a Source", f)
	}
	if err := flowlet.Check(f, p.Info()); err != nil {
		t.Fatal(err)
	}
	ctx := flowlettest.New("upper").WithInstance(1, 3)
	if err := ctx.Init(f, map[string]any{"prefix": "p-"}); err != nil {
		t.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()

	// Emits with keys and headers.
	at := time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC)
	in := flowlettest.Event("abc", flowlet.EventTime(at), flowlet.TraceID("tr-1"), flowlet.Key("x", "y"))
	if err := ctx.Process(f, in, ev("def"), ev("whoami")); err != nil {
		t.Fatal(err)
	}
	got := ctx.Emitted()
	if len(got) != 3 || string(got[0].Payload) != "p-ABC" || string(got[1].Payload) != "p-DEF" {
		t.Fatalf("emitted %+v", got)
	}
	if k, _ := got[0].Key("k"); k != "abc" || !got[0].EventTime.Equal(at) || got[0].TraceID != "tr-1" {
		t.Errorf("first emit's options: %+v", got[0].EmitOptions)
	}
	if k, _ := got[0].Key("in_x"); k != "y" {
		t.Errorf("input keys did not reach the plugin: %+v", got[0].EmitOptions)
	}
	if w := ctx.Emits("whoami"); !slices.Equal(w, []string{"upper/1/3"}) {
		t.Errorf("whoami: %v", w)
	}
	if tr := transport(f); tr != "channel" {
		t.Errorf("a Go SDK plugin's steps go over %q, want the step channel", tr)
	}

	// State through the broker: writes in order, reads see the step's own
	// writes and the committed state, counters add up.
	ctx.Reset()
	steps := [][]string{
		{"put:a=1", "put:b=2", "get:a", "count:x", "count:x", "count:y"},
		{"get:b", "del:b", "get:b", "put:a2=3", "scan:a", "count:x", "cscan:"},
	}
	for _, s := range steps {
		var evs []flowlet.Event
		for _, c := range s {
			evs = append(evs, ev(c))
		}
		if err := ctx.Process(f, evs...); err != nil {
			t.Fatal(err)
		}
	}
	if g := ctx.Emits("got"); !slices.Equal(g, []string{"1", "2", "<missing>"}) {
		t.Errorf("got %v", g)
	}
	if c := ctx.Emits("counts"); !slices.Equal(c, []string{"x=1", "x=2", "y=1", "x=3"}) {
		t.Errorf("counts %v", c)
	}
	if s := ctx.Emits("scanned"); !slices.Equal(s, []string{"a=1,a2=3", "x=3,y=1"}) {
		t.Errorf("scanned %v", s)
	}
	if tb := ctx.Table("t"); len(tb) != 2 || tb["a"] != "1" || tb["a2"] != "3" {
		t.Errorf("table %v", tb)
	}
	if n := ctx.Count("c", "x"); n != 3 {
		t.Errorf("counter x = %d", n)
	}

	// A failing step leaves no trace, and the error keeps its message and
	// permanence.
	ctx.Reset()
	err := ctx.Process(f, ev("put:z=9"), ev("fail:bad line"))
	var se *pluginhost.StepError
	if !errors.As(err, &se) || se.Message != "failed on request: bad line" || !se.Permanent() {
		t.Fatalf("want a permanent StepError, got %#v", err)
	}
	if _, ok := ctx.Get("t", "z"); ok || len(ctx.Emitted()) != 0 {
		t.Error("a failed step left writes or emits")
	}

	// Ticks keep the flowlet's fields between calls.
	for range 2 {
		if err := ctx.Tick(f); err != nil {
			t.Fatal(err)
		}
	}
	if tk := ctx.Emits("ticks"); !slices.Equal(tk, []string{"p-tick 1", "p-tick 2"}) {
		t.Errorf("ticks %v", tk)
	}

	// The plugin's logs reach the host's logger, tagged.
	if err := ctx.Process(f, ev("log:hello")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		l := logs.String()
		return strings.Contains(l, "raw stderr: hello") && strings.Contains(l, `msg="plugin: asked to log" flowlet=upper instance=1`)
	}, "plugin logs in the host's log:\n%s", logs)
	if !strings.Contains(logs.String(), "plugin: initialized") {
		t.Errorf("Init's log line is missing:\n%s", logs)
	}
}

func waitFor(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killBetweenCalls kills f's process and waits until the host has seen it
// exit, so that the next call must start another.
func killBetweenCalls(t *testing.T, f flowlet.Flowlet) {
	t.Helper()
	syscall.Kill(pid(f), syscall.SIGKILL)
	waitFor(t, func() bool { return pluginhost.ProcessExited(f) }, "the host never saw its killed process exit")
}

// dlCtx is a flowlettest Context that can dead-letter, as the runtime's.
type dlCtx struct {
	bare
	dead []string
}

// bare is a flowlettest Context with only the methods of flowlet.Context
// (whatever optional ones flowlettest's has), as a host's Context that
// cannot dead-letter.
type bare struct{ flowlet.Context }

func (c *dlCtx) DeadLetter(p []byte, reason string) error {
	c.dead = append(c.dead, string(p)+": "+reason)
	return nil
}

// dleCtx can dead-letter input events too, as the runtime's.
type dleCtx struct {
	dlCtx
	events []flowlet.Event
}

func (c *dleCtx) DeadLetterEvent(ev flowlet.Event, reason string) error {
	c.events = append(c.events, ev)
	c.dead = append(c.dead, ev.ID+": "+reason)
	return nil
}

// TestDeadLetterEvent: the plugin's DeadLetterEvent reaches the host's with
// the very event of the batch (id, input, payload, keys); offered only when
// the host's Context has it.
func TestDeadLetterEvent(t *testing.T) {
	p := open(t, "dle", "testplugin", options(t, nil))
	f := p.New().(flowlet.BatchProcessor)
	tc := flowlettest.New("dle")
	ctx := &dleCtx{dlCtx: dlCtx{bare: bare{tc}}}
	evs := []flowlet.Event{ev("a"), ev("deadev:1"), ev("b"), ev("deadev:2")}
	for i := range evs {
		evs[i].ID, evs[i].Input = fmt.Sprintf("id-%d", i), []string{"q1", "q2"}[i%2]
	}
	evs[3].Keys = []flowlet.KeyValue{{Name: "k", Value: "v"}}
	if err := f.ProcessBatch(ctx, evs); err != nil {
		t.Fatal(err)
	}
	tc.Commit()
	if len(ctx.events) != 2 || ctx.events[0].ID != "id-1" || ctx.events[1].ID != "id-3" || ctx.events[1].Input != "q2" ||
		string(ctx.events[1].Payload) != "deadev:2" || len(ctx.events[1].Keys) != 1 || ctx.dead[0] != "id-1: dead event on request" {
		t.Errorf("dead-lettered events %+v (%v)", ctx.events, ctx.dead)
	}
	if !slices.Equal(tc.Emits("out"), []string{"A", "B"}) {
		t.Errorf("out %v", tc.Emits("out"))
	}
	only := &dlCtx{bare: bare{flowlettest.New("dle")}}
	if err := f.ProcessBatch(only, []flowlet.Event{ev("deadev")}); err == nil || !strings.Contains(err.Error(), "no DeadLetterEvent") {
		t.Errorf("without DeadLetterEvent on the host: %v", err)
	}
}

func TestDeadLetterAndPanic(t *testing.T) {
	p := open(t, "dl", "testplugin", options(t, nil))
	f := p.New().(flowlet.BatchProcessor)
	tc := flowlettest.New("dl")
	ctx := &dlCtx{bare: bare{tc}}
	if err := f.ProcessBatch(ctx, []flowlet.Event{ev("dead"), ev("ok")}); err != nil {
		t.Fatal(err)
	}
	tc.Commit()
	if !slices.Equal(ctx.dead, []string{"dead: dead on request"}) || !slices.Equal(tc.Emits("out"), []string{"OK"}) {
		t.Errorf("dead %v, out %v", ctx.dead, tc.Emits("out"))
	}
	// Without DeadLetter on the host's context, the plugin has none.
	plain := bare{flowlettest.New("dl")}
	if err := f.ProcessBatch(plain, []flowlet.Event{ev("dead")}); err == nil || !strings.Contains(err.Error(), "no DeadLetter") {
		t.Errorf("got %v", err)
	}

	// A panic is recovered in the plugin: the step fails, the process lives.
	before := pid(f)
	err := f.ProcessBatch(plain, []flowlet.Event{ev("panic")})
	var se *pluginhost.StepError
	if !errors.As(err, &se) || !se.Panic || !strings.Contains(se.Stack, "main.(*testFlowlet).ProcessBatch") {
		t.Fatalf("want a panic StepError with a stack, got %#v", err)
	}
	if err := f.ProcessBatch(plain, []flowlet.Event{ev("x")}); err != nil || pid(f) != before {
		t.Errorf("after a panic: %v, pid %d → %d", err, before, pid(f))
	}
}

// TestKillMidBatch kills the plugin process with SIGKILL while it processes
// a batch, again and again: each time the call fails with a CallError and no
// trace of the step, and the next call restarts the plugin (with its
// config) and succeeds.
func TestKillMidBatch(t *testing.T) {
	p := open(t, "victim", "testplugin", options(t, nil))
	f := p.New()
	ctx := flowlettest.New("victim")
	if err := ctx.Init(f, map[string]any{"prefix": "v-"}); err != nil {
		t.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()
	midBatch := filepath.Join(t.TempDir(), "mid-batch")
	if err := syscall.Mkfifo(midBatch, 0o600); err != nil {
		t.Fatal(err)
	}
	pids := map[int]bool{}
	for i := range 5 {
		old := pid(f)
		pids[old] = true
		go func() {
			os.ReadFile(midBatch) // the plugin has run the put and the count
			syscall.Kill(old, syscall.SIGKILL)
		}()
		err := ctx.Process(f, ev(fmt.Sprintf("put:k%d=v", i)), ev("count:n"), ev("signal:"+midBatch), ev("hang"), ev("after"))
		var ce *pluginhost.CallError
		if !errors.As(err, &ce) || ce.Timeout || ce.Op != "ProcessBatch" || ce.Flowlet != "victim" {
			t.Fatalf("kill %d: want a CallError, got %#v", i, err)
		}
		// "exited" once go-plugin has seen the exit, which a loaded
		// machine can delay past the host's short wait for it.
		if !strings.Contains(err.Error(), "restarts at the next call") {
			t.Errorf("kill %d: %v", i, err)
		}
		if err := ctx.Process(f, ev("again")); err != nil {
			t.Fatalf("after kill %d: %v", i, err)
		}
		if pids[pid(f)] {
			t.Fatalf("after kill %d: same pid %d", i, pid(f))
		}
		if tr := transport(f); tr != "channel" {
			t.Fatalf("after kill %d: the restarted process's steps go over %q, want the step channel", i, tr)
		}
	}
	if got := ctx.Emits("out"); len(got) != 5 || got[0] != "v-AGAIN" {
		t.Errorf("emits after restarts: %v (the restarted plugin must get its config)", got)
	}
	if len(ctx.Table("t")) != 0 || ctx.Count("c", "n") != 0 {
		t.Errorf("killed steps left state: %v %v", ctx.Table("t"), ctx.CountersMap("c"))
	}

	// A process that dies between calls is restarted too.
	killBetweenCalls(t, f)
	if err := ctx.Process(f, ev("between")); err != nil {
		t.Fatal(err)
	}
}

func TestExitAndHang(t *testing.T) {
	o := options(t, nil)
	o.CallTimeout = 700 * time.Millisecond
	p := open(t, "hangs", "testplugin", o)
	f := p.New()
	ctx := flowlettest.New("hangs")

	err := ctx.Process(f, ev("exit"))
	var ce *pluginhost.CallError
	if !errors.As(err, &ce) || ce.Timeout {
		t.Fatalf("exit: want a CallError, got %#v", err)
	}
	if err := ctx.Process(f, ev("a")); err != nil {
		t.Fatal(err)
	}

	old := pid(f)
	// A hang never returns by itself: the error is the deadline's.
	err = ctx.Process(f, ev("b"), ev("hang"))
	if !errors.As(err, &ce) || !ce.Timeout || !strings.Contains(err.Error(), "deadline of 700ms") {
		t.Fatalf("hang: want a timeout CallError, got %#v", err)
	}
	if err := syscall.Kill(old, 0); err == nil {
		// killed, maybe not yet reaped by go-plugin: give it a moment
		waitFor(t, func() bool { return syscall.Kill(old, 0) != nil }, "hung plugin %d still alive", old)
	}
	if err := ctx.Process(f, ev("c")); err != nil {
		t.Fatal(err)
	}
	if got := ctx.Emits("out"); !slices.Equal(got, []string{"A", "C"}) {
		t.Errorf("out %v", got)
	}
}

func TestInitError(t *testing.T) {
	p := open(t, "picky", "testplugin", options(t, nil))
	f := p.New()
	err := flowlettest.New("picky").Init(f, map[string]any{"fail_init": true})
	var ie *pluginhost.InitError
	if !errors.As(err, &ie) || ie.Flowlet != "picky" || ie.Instance != 0 || err.Error() != "plugin init: init refused by config" {
		t.Fatalf("got %v", err)
	}
	err = flowlettest.New("picky").Init(p.New(), map[string]any{"prefix": 3})
	if err == nil || !strings.Contains(err.Error(), `config field "prefix": want a string`) {
		t.Fatalf("got %v", err)
	}
}

func TestHandshakeMismatch(t *testing.T) {
	_, err := pluginhost.Open(context.Background(), "future", "badversion", "testdata", options(t, nil))
	var he *pluginhost.HandshakeError
	if !errors.As(err, &he) || he.Flowlet != "future" || !strings.Contains(err.Error(), "protocol version mismatch") ||
		!strings.Contains(err.Error(), "Plugin version: 99") {
		t.Fatalf("want a HandshakeError, got %v", err)
	}
	t.Log(err)

	script := filepath.Join(t.TempDir(), "notaplugin")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello\nsleep 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = pluginhost.Open(context.Background(), "script", script, "", options(t, nil))
	if !errors.As(err, &he) || he.Flowlet != "script" || !strings.Contains(err.Error(), "is it a flowrun plugin") {
		t.Fatalf("want a HandshakeError, got %v", err)
	}
	t.Log(err)

	// A flowrun plugin started without the host's magic cookie (by hand,
	// say) refuses to run; started by a host whose cookie differs, it exits
	// before the handshake.
	p := open(t, "real", "testplugin", options(t, nil))
	wrapper := filepath.Join(t.TempDir(), "nocookie")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\nunset FLOWRUN_PLUGIN\nexec "+p.Binary()+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = pluginhost.Open(context.Background(), "nocookie", wrapper, "", options(t, nil))
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "exited before the handshake") ||
		!strings.Contains(err.Error(), "This binary is a plugin") {
		t.Fatalf("want a HandshakeError, got %v", err)
	}
	t.Log(err)
}

func TestBuildFailure(t *testing.T) {
	_, err := pluginhost.Open(context.Background(), "broken_parser", "broken", "testdata", options(t, nil))
	var be *pluginhost.BuildError
	if !errors.As(err, &be) || be.Flowlet != "broken_parser" ||
		!strings.Contains(err.Error(), `flowlet "broken_parser": building plugin`) ||
		!strings.Contains(err.Error(), "undefined: undefinedFunction") {
		t.Fatalf("want a BuildError naming the flowlet with the compiler's message, got %v", err)
	}
	t.Log(err)

	_, err = pluginhost.Open(context.Background(), "missing", "nosuchdir", "testdata", options(t, nil))
	var se *pluginhost.StartError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), `flowlet "missing"`) {
		t.Fatalf("got %v", err)
	}
}

// TestBuildCache: the cache is keyed by the sources, so an edit rebuilds
// and an unchanged tree does not.
func TestBuildCache(t *testing.T) {
	// A module of its own, so that edits to the repository's go.mod do not
	// change the key while the test runs.
	dir := filepath.Join(t.TempDir(), "cachetest")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module cachetest\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(msg string) {
		src := "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(" + strconv.Quote(msg) + ") }\n"
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	abs, _ := filepath.Abs(dir)
	var logs logBuf
	o := options(t, &logs)
	write("one")
	b1, err := pluginhost.Build(context.Background(), "c", abs, o)
	if err != nil {
		t.Fatal(err)
	}
	// A build says when it starts and how long it took, at Info.
	if l := logs.String(); !strings.Contains(l, `level=INFO msg="building plugin" flowlet=c dir=`+abs+" cache="+o.CacheDir) ||
		!strings.Contains(l, `level=INFO msg="plugin built" flowlet=c`) || !strings.Contains(l, "cached=false duration=") {
		t.Errorf("build logs:\n%s", l)
	}
	logs = logBuf{}
	st1, _ := os.Stat(b1)
	b2, err := pluginhost.Build(context.Background(), "c", abs, o)
	if err != nil || b2 != b1 {
		t.Fatalf("unchanged sources: %v, %s vs %s", err, b1, b2)
	}
	// A cache hit, at Debug only.
	if l := logs.String(); strings.Contains(l, "level=INFO") || !strings.Contains(l, `level=DEBUG msg="plugin build cache hit" flowlet=c`) ||
		!strings.Contains(l, "cached=true") {
		t.Errorf("cache hit logs:\n%s", l)
	}
	if st2, _ := os.Stat(b2); !st2.ModTime().Equal(st1.ModTime()) {
		t.Error("unchanged sources were rebuilt")
	}
	write("two")
	b3, err := pluginhost.Build(context.Background(), "c", abs, o)
	if err != nil || b3 == b1 {
		t.Fatalf("edited sources: %v, same binary %s", err, b3)
	}
}

// TestUnaryPlugin: a plugin without the Steps stream (written against the
// contract alone, as in another language) gets its steps as unary calls,
// and its plain emits are applied.
func TestUnaryPlugin(t *testing.T) {
	p := open(t, "unary", "unary", options(t, nil))
	f := p.New().(flowlet.BatchProcessor)
	ctx := flowlettest.New("unary")
	for round := range 3 {
		evs := []flowlet.Event{ev("a"), ev("b")}
		for i := range evs {
			evs[i].ID = fmt.Sprintf("r%d-%d", round, i)
		}
		if err := f.ProcessBatch(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	ctx.Commit()
	if got := ctx.Emits("out"); !slices.Equal(got, []string{"A", "B", "A", "B", "A", "B"}) {
		t.Errorf("out %v", got)
	}
	if tr := transport(f); tr != "unary" {
		t.Errorf("transport %q, want unary", tr)
	}
}

// TestStepsStream: a plugin without the step channel (an older SDK; here
// the SDK with FLOWRUN_PLUGIN_CHANNEL=off) gets its steps over the Steps
// stream: emits, state through the broker, a failing step, a hang past
// the deadline (the process is killed, the next step runs in a new one).
func TestStepsStream(t *testing.T) {
	o := options(t, nil)
	o.CallTimeout = 700 * time.Millisecond
	o.Env = append(o.Env, plugin.ChannelEnv+"=off")
	p := open(t, "stream", "testplugin", o)
	f := p.New()
	ctx := flowlettest.New("stream")
	if err := ctx.Init(f, map[string]any{"prefix": "s-"}); err != nil {
		t.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()
	if err := ctx.Process(f, ev("abc"), ev("put:a=1"), ev("get:a"), ev("count:n")); err != nil {
		t.Fatal(err)
	}
	if tr := transport(f); tr != "steps" {
		t.Fatalf("transport %q, want steps", tr)
	}
	if got := ctx.Emits("out"); len(got) == 0 || got[0] != "s-ABC" {
		t.Errorf("out %v", got)
	}
	if g := ctx.Emits("got"); !slices.Equal(g, []string{"1"}) || ctx.Count("c", "n") != 1 {
		t.Errorf("state over the broker: got %v, count %d", g, ctx.Count("c", "n"))
	}
	if err := ctx.Process(f, ev("count:n"), ev("fail:x")); err == nil || ctx.Count("c", "n") != 1 {
		t.Errorf("a failing step: %v, count %d", err, ctx.Count("c", "n"))
	}
	old := pid(f)
	err := ctx.Process(f, ev("sleep:5000"))
	var ce *pluginhost.CallError
	if !errors.As(err, &ce) || !ce.Timeout {
		t.Fatalf("hang: want a timeout, got %v", err)
	}
	if err := ctx.Process(f, ev("again")); err != nil {
		t.Fatal(err)
	}
	if pid(f) == old || transport(f) != "steps" {
		t.Errorf("after the hang: pid %d (was %d), transport %q", pid(f), old, transport(f))
	}
}

// TestCancelledStep: cancelling the step's context (a shutdown) aborts a
// step in flight on the step channel at once, well before the deadline;
// the process is killed, nothing of the step is applied, and the next step
// runs in a new process.
func TestCancelledStep(t *testing.T) {
	p := open(t, "cancel", "testplugin", options(t, nil)) // 20s deadline
	f := p.New()
	ctx := flowlettest.New("cancel")
	if err := ctx.Init(f, nil); err != nil {
		t.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()
	old := pid(f)
	cctx, cancel := context.WithCancel(context.Background())
	ctx.Context = cctx
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := ctx.Process(f, ev("count:n"), ev("sleep:10000"))
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("want a cancelled step, got %v", err)
	}
	if d := time.Since(start); d >= 10*time.Second {
		t.Errorf("the cancelled step returned after %v: the plugin's whole sleep, not cut short", d)
	}
	if ctx.Count("c", "n") != 0 {
		t.Errorf("the cancelled step left state: %v", ctx.CountersMap("c"))
	}
	ctx.Context = context.Background()
	if err := ctx.Process(f, ev("after")); err != nil {
		t.Fatal(err)
	}
	if p := pid(f); p == old || p == 0 {
		t.Errorf("pid %d after the cancelled step (was %d)", p, old)
	}
}

// TestChannelRefused: a plugin that refuses the host's certificate on the
// step channel (in TLS 1.3 the host's handshake completes before the
// plugin has checked it) makes the host fall back, with a warning, before
// the first step: no step fails and the process is not restarted.
func TestChannelRefused(t *testing.T) {
	logs := &logBuf{}
	o := options(t, logs)
	o.Env = append(o.Env, "UNARY_CHANNEL=refuse")
	p := open(t, "refused", "unary", o)
	f := p.New().(flowlet.BatchProcessor)
	ctx := flowlettest.New("refused")
	if err := ctx.Init(f, nil); err != nil {
		t.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()
	old := pid(f)
	for range 3 {
		if err := f.ProcessBatch(ctx, []flowlet.Event{ev("a")}); err != nil {
			t.Fatal(err)
		}
	}
	ctx.Commit()
	if got := ctx.Emits("out"); !slices.Equal(got, []string{"A", "A", "A"}) {
		t.Errorf("out %v", got)
	}
	if tr := transport(f); tr != "unary" || pid(f) != old {
		t.Errorf("transport %q, pid %d (was %d); want unary calls in the same process", tr, pid(f), old)
	}
	if l := logs.String(); !strings.Contains(l, "step channel unavailable") || !strings.Contains(l, "no acknowledgement") {
		t.Errorf("no warning naming the missing acknowledgement:\n%s", l)
	}
}

// TestSlowOpenChannel: OpenChannel has a deadline of its own. An Init that
// takes all but a second of its call timeout, followed by an OpenChannel
// that takes two, starts the instance; an OpenChannel that never answers
// makes the host fall back (a warning) instead of killing the process.
func TestSlowOpenChannel(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		timeout time.Duration
	}{{"slow", 3 * time.Second}, {"hang", 700 * time.Millisecond}} {
		t.Run(tc.mode, func(t *testing.T) {
			logs := &logBuf{}
			o := options(t, logs)
			o.CallTimeout = tc.timeout
			o.Env = append(o.Env, "UNARY_CHANNEL="+tc.mode)
			p := open(t, "slowopen", "unary", o)
			f := p.New().(flowlet.BatchProcessor)
			ctx := flowlettest.New("slowopen")
			if err := ctx.Init(f, nil); err != nil {
				t.Fatal(err)
			}
			defer f.(flowlet.Closer).Close()
			old := pid(f)
			if err := f.ProcessBatch(ctx, []flowlet.Event{ev("a")}); err != nil {
				t.Fatal(err)
			}
			ctx.Commit()
			if got := ctx.Emits("out"); !slices.Equal(got, []string{"A"}) {
				t.Errorf("out %v", got)
			}
			if tr := transport(f); tr != "unary" || pid(f) != old {
				t.Errorf("transport %q, pid %d (was %d); want unary calls in the same process", tr, pid(f), old)
			}
			if tc.mode == "hang" && !strings.Contains(logs.String(), "step channel unavailable") {
				t.Errorf("no warning:\n%s", logs)
			}
		})
	}
}

// TestUnsendableResponse: a step response the plugin cannot send on the
// step channel (here one that cannot be marshalled: a trace id that is not
// UTF-8; a frame over 256 MiB fails the same way) fails the step with a
// CallError whose message names the cause, from the plugin's stderr.
func TestUnsendableResponse(t *testing.T) {
	p := open(t, "unsendable", "testplugin", options(t, nil))
	f := p.New()
	ctx := flowlettest.New("unsendable")
	if err := ctx.Process(f, ev("a")); err != nil {
		t.Fatal(err)
	}
	if tr := transport(f); tr != "channel" {
		t.Fatalf("transport %q, want the step channel", tr)
	}
	err := ctx.Process(f, ev("badutf8"))
	var ce *pluginhost.CallError
	if !errors.As(err, &ce) || !strings.Contains(ce.Stderr, "cannot send the step's response") ||
		!strings.Contains(err.Error(), "invalid UTF-8") {
		t.Fatalf("want a CallError naming the cause, got %v", err)
	}
	if err := ctx.Process(f, ev("b")); err != nil {
		t.Fatal(err)
	}
}

// TestRestartAfterCacheTrimmed: a plugin whose cache entry is removed while
// it runs (another app trimmed the cache) still restarts after a crash: its
// processes start from the host's own link of the binary.
func TestRestartAfterCacheTrimmed(t *testing.T) {
	o := options(t, nil)
	o.CacheDir = t.TempDir() // the entry is removed below
	p := open(t, "trimmed", "testplugin", o)
	f := p.New()
	ctx := flowlettest.New("trimmed")
	if err := ctx.Init(f, map[string]any{"prefix": "t-"}); err != nil {
		t.Fatal(err)
	}
	defer f.(flowlet.Closer).Close()
	if err := os.RemoveAll(filepath.Dir(p.Binary())); err != nil {
		t.Fatal(err)
	}
	old := pid(f)
	killBetweenCalls(t, f)
	if err := ctx.Process(f, ev("again")); err != nil {
		t.Fatalf("restart after the cache entry was removed: %v", err)
	}
	if pid(f) == old {
		t.Fatal("the killed process was not replaced")
	}
	// A second instance starts a process of its own, from the link too.
	g := p.New()
	if err := ctx.Init(g, map[string]any{"prefix": "u-"}); err != nil {
		t.Fatalf("new instance after the cache entry was removed: %v", err)
	}
	defer g.(flowlet.Closer).Close()
	if got := ctx.Emits("out"); len(got) != 1 || got[0] != "t-AGAIN" {
		t.Errorf("emits: %v", got)
	}
}
