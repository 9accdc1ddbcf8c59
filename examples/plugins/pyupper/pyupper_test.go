package pyupper_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/flowlet/flowlettest"
	"github.com/flowrun/flowrun/internal/pluginhost"
	"github.com/flowrun/flowrun/runtime/cli"
	"github.com/flowrun/flowrun/runtime/cli/clitest"
)

// python is the interpreter of pyupper.py's shebang line.
const python = "/usr/bin/python3"

// installLine is what a machine needs for these tests.
const installLine = "apt-get install -y python3-grpcio python3-protobuf python3-cryptography"

// requirePython skips the test when the Python modules the plugin needs are
// missing, or fails it in CI (CI=true), where they must be installed.
func requirePython(t *testing.T) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import grpc, google.protobuf, cryptography").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("the Python plugin needs %s with grpc, protobuf and cryptography (%s): %v\n%s", python, installLine, err, out)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// dlCtx is a step Context that can dead-letter, as the runtime's can.
// bare is a flowlettest Context with only the methods of flowlet.Context
// (whatever optional ones flowlettest's has): a host's Context that cannot
// dead-letter.
type bare struct{ flowlet.Context }

type dlCtx struct {
	*flowlettest.Context
	payloads []string
	events   []flowlet.Event
}

func (c *dlCtx) DeadLetter(payload []byte, reason string) error {
	c.payloads = append(c.payloads, string(payload)+": "+reason)
	return nil
}

func (c *dlCtx) DeadLetterEvent(ev flowlet.Event, reason string) error {
	c.events = append(c.events, ev)
	return nil
}

func events(round int, payloads ...string) []flowlet.Event {
	evs := make([]flowlet.Event, len(payloads))
	for i, p := range payloads {
		evs[i] = flowlettest.Event(p)
		evs[i].ID = fmt.Sprintf("r%d-%d", round, i)
		evs[i].Input = "in"
	}
	return evs
}

// TestPluginhost runs pyupper.py through the host as the runtime does: the
// handshake with AutoMTLS, Describe, Init with the config, batches over the
// unary fallback (the plugin has no Steps stream), emits, counter writes,
// dead letters, a permanent error, and the plugin's log lines in the host's
// log.
func TestPluginhost(t *testing.T) {
	requirePython(t)
	t.Setenv("PLUGIN_UNIX_SOCKET_DIR", t.TempDir()) // killed plugins leave their socket there
	var logs bytes.Buffer
	opts := pluginhost.Options{
		CacheDir: t.TempDir(), CallTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p, err := pluginhost.Open(context.Background(), "pyupper", "pyupper.py", wd, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Logf("started and described in %v", time.Since(start))
	if info := p.Info(); !slices.Equal(info.Outputs, []string{"out"}) || info.Source || info.Sink || !strings.Contains(info.Doc, "Python") {
		t.Fatalf("info %+v", info)
	}
	f := p.New()
	ctx := flowlettest.New("pyupper")
	if err := ctx.Init(f, map[string]any{"greeting": "hi"}); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		if err := ctx.Process(f, events(round, "a", "b c", "déjà")...); err != nil {
			t.Fatal(err)
		}
	}
	// bytes.upper() in Python upper-cases ASCII letters only.
	if got, want := ctx.Emits("out"), slices.Repeat([]string{"A", "B C", "DéJà"}, 3); !slices.Equal(got, want) {
		t.Errorf("out %q, want %q", got, want)
	}
	// Each emit's key "count" is the counter read back from the host after
	// the step's add: the read saw the step's own write.
	for i, e := range ctx.Emitted() {
		if w := fmt.Sprint(3 * (i/3 + 1)); len(e.Keys) != 1 || e.Keys[0].Name != "count" || e.Keys[0].Value != w {
			t.Errorf("emit %d: keys %v, want count=%s", i, e.Keys, w)
		}
	}
	if n := ctx.Count("lines", "n"); n != 9 {
		t.Errorf("lines n = %d, want 9", n)
	}

	// A bad line with a Context that cannot dead-letter: a permanent error,
	// nothing of the step applied.
	ctx.Reset()
	err = f.(flowlet.BatchProcessor).ProcessBatch(bare{ctx}, events(3, "x", "bad y"))
	var se *pluginhost.StepError
	if !errors.As(err, &se) || !flowlet.IsPermanent(err) || !strings.Contains(err.Error(), "bad line") {
		t.Fatalf("bad line: %v (%T), permanent %v", err, err, flowlet.IsPermanent(err))
	}
	if got := ctx.Emits("out"); len(got) != 0 {
		t.Errorf("failed step emitted %q", got)
	}
	if n := ctx.Count("lines", "n"); n != 9 {
		t.Errorf("lines n = %d after a failed step, want 9", n)
	}

	// With a Context that can: the event itself goes to the DLQ.
	dl := &dlCtx{Context: ctx}
	evs := events(4, "x", "bad y", "z")
	if err := f.(flowlet.BatchProcessor).ProcessBatch(dl, evs); err != nil {
		t.Fatal(err)
	}
	ctx.Commit()
	if got := ctx.Emits("out"); !slices.Equal(got, []string{"X", "Z"}) {
		t.Errorf("out %q", got)
	}
	if len(dl.events) != 1 || dl.events[0].ID != evs[1].ID || string(dl.events[0].Payload) != "bad y" || dl.events[0].Input != "in" {
		t.Errorf("dead letters %+v %q", dl.events, dl.payloads)
	}
	if n := ctx.Count("lines", "n"); n != 11 {
		t.Errorf("lines n = %d, want 11", n)
	}
	if err := f.(flowlet.Closer).Close(); err != nil {
		t.Fatal(err)
	}
	if l := logs.String(); !strings.Contains(l, "pyupper ready") || !strings.Contains(l, "greeting") || !strings.Contains(l, "flowlet=pyupper") {
		t.Errorf("the plugin's log line is missing from the host's log:\n%s", l)
	}
}

const app = `
app: pyplugged
flowlets:
  gen:
    type: generator
    config: {count: %d, batch: 70, payload: "{mod:100} line {seq}"}
  upper:
    plugin: %s
    instances: 2
    batch_size: 50
  sink:
    type: file_sink
    config: {path: out.txt}
connections:
  - {from: gen, to: upper, strategy: round_robin}
  - {from: upper, to: sink}
`

func runCLI(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	return clitest.Run(t, dir, args...)
}

// TestApp runs an app whose flowlet is `plugin: <path to pyupper.py>`
// (relative to the app file) through the CLI: validate, run --drain with
// two instances into a file sink, and the plugin's counter in the state.
func TestApp(t *testing.T) {
	requirePython(t)
	dir := t.TempDir()
	t.Setenv("PLUGIN_UNIX_SOCKET_DIR", t.TempDir()) // killed plugins leave their socket there
	script, err := filepath.Abs("pyupper.py")
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, script)
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	if err := os.WriteFile(filepath.Join(dir, "app.yaml"), []byte(fmt.Sprintf(app, n, rel)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCLI(t, dir, "validate", "app.yaml"); code != cli.ExitOK || !strings.Contains(out, "ok") {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs := runCLI(t, dir, "run", "--drain", "--no-sync", "--http", "off", "--progress", "never", "app.yaml")
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d\n%s%s", code, out, errs)
	}
	clitest.ExpectLines(t, filepath.Join(dir, "out.txt"), n, func(i int) string { return fmt.Sprintf("%d LINE %d", i%100, i) })
	code, out, errs = runCLI(t, dir, "state", "get", "app.yaml", "upper", "lines", "n", "--counters")
	if code != cli.ExitOK || strings.TrimSpace(out) != fmt.Sprint(n) {
		t.Errorf("state get upper lines n: exit %d, %q %s", code, out, errs)
	}
}

// TestGenerated: the committed flowlet_pb2.py is what protoc makes of the
// .proto now (skipped without protoc).
func TestGenerated(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Skip("no protoc (Debian: protobuf-compiler)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("protoc", "--proto_path=../../../proto", "--python_out="+dir, "flowlet.proto").CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, out)
	}
	want, _ := os.ReadFile(filepath.Join(dir, "flowlet_pb2.py"))
	got, _ := os.ReadFile("flowlet_pb2.py")
	if !bytes.Equal(got, want) {
		t.Error("flowlet_pb2.py is stale: run go generate ./examples/plugins/pyupper")
	}
}
