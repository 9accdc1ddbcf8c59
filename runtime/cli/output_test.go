package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// testFail is a source whose every step fails.
type testFail struct{}

func (testFail) Generate(flowlet.Context) error { return errors.New("broken input") }

func init() {
	flowlet.Register("clitest_fail", func() flowlet.Flowlet { return testFail{} }, flowlet.TypeInfo{Source: true, Doc: "test: a source that always fails"})
}

// runCLI2 runs the CLI in process and returns stdout and stderr apart.
func runCLI2(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Run(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// A source that gave up fails run --drain: the summary says the run stopped
// on an error, not that it drained (the drain itself completed). And dlq
// replay that fails prints only its error, no "replayed 0" first.
func TestFailedRunOutput(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	app := writeApp(t, dir, "app.yaml", `app: failing
flowlets:
  src: {type: clitest_fail, retries: {max: 0}}
  cnt: {type: clitest_counts}
connections:
  - {from: src, to: cnt}
`)
	code, out := runCLI(t, "run", "--drain", "--progress", "never", "--no-sync", "--http", "off", "--data", data, app)
	if code != ExitFailure || !strings.Contains(out, "app failing stopped on an error after") || strings.Contains(out, "drained after") ||
		!strings.Contains(out, "broken input") {
		t.Fatalf("run --drain with a failing source: exit %d, want 1 and no \"drained\" in the summary\n%s", code, out)
	}

	code, stdout, stderr := runCLI2(t, "dlq", "replay", "--data", data, app, "src")
	if code != ExitFailure || stdout != "" || !strings.Contains(stderr, "consumes no input") {
		t.Errorf("dlq replay of a source: exit %d, want 1, only the error\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI2(t, "dlq", "replay", "--data", data, app, "cnt")
	if code != 0 || !strings.Contains(stdout, "replayed 0 dead letter(s) of cnt") {
		t.Errorf("dlq replay: exit %d\n%s", code, stdout)
	}
}

// validate --json answers on stdout whatever the problem, also when the file
// cannot be read at all.
func TestValidateJSONMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	code, stdout, _ := runCLI2(t, "validate", "--json", missing)
	var out struct {
		Valid  bool `json:"valid"`
		Errors []struct {
			File    string `json:"file"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != ExitFailure {
		t.Fatalf("exit %d, stdout %q: %v", code, stdout, err)
	}
	if out.Valid || len(out.Errors) != 1 || out.Errors[0].File != missing || !strings.Contains(out.Errors[0].Message, "no such file") {
		t.Errorf("got %+v", out)
	}
}

// validate --json lists every problem of the file with its position (the
// list came out empty).
func TestValidateJSONFileErrors(t *testing.T) {
	app := filepath.Join(t.TempDir(), "app.yaml")
	if err := os.WriteFile(app, []byte("app: x\nflowlets:\n  a: {type: nope}\n  b: {type: nada}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := runCLI2(t, "validate", "--json", app)
	var out struct {
		Valid  bool `json:"valid"`
		Errors []struct {
			Line    int    `json:"line"`
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != ExitFailure {
		t.Fatalf("exit %d, stdout %q: %v", code, stdout, err)
	}
	if out.Valid || len(out.Errors) != 2 || out.Errors[0].Line != 3 || !strings.Contains(out.Errors[1].Message, `unknown flowlet type "nada"`) {
		t.Errorf("got %+v", out)
	}
}

// validate --store says what a run would change in the app's store, or why
// it would refuse, and changes nothing.
func TestValidateAgainstStore(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := write("v1.yaml", `app: vs
flowlets:
  gen: {type: generator, config: {count: 100}}
  a: {type: file_sink, config: {path: `+filepath.Join(dir, "a.txt")+`}}
  b: {type: file_sink, config: {path: `+filepath.Join(dir, "b.txt")+`}}
connections:
  - {from: gen, to: a}
  - {from: gen, to: b}
`)
	code, stdout, _ := runCLI2(t, "validate", "--store", "--data", data, v1)
	if code != 0 || !strings.Contains(stdout, "store "+data+": none yet") {
		t.Fatalf("no store yet: exit %d\n%s", code, stdout)
	}
	if code, out := runCLI(t, "run", "--drain", "--progress", "never", "--http", "off", "--no-sync", "--data", data, v1); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	code, stdout, _ = runCLI2(t, "validate", "--store", "--data", data, v1)
	if code != 0 || !strings.Contains(stdout, "a run changes nothing in it") {
		t.Fatalf("the same app: exit %d\n%s", code, stdout)
	}
	src, _ := os.ReadFile(v1)
	renamed := write("v2.yaml", strings.NewReplacer("  a: {", "  a2: {", "to: a}", "to: a2}").Replace(string(src)))
	code, stdout, _ = runCLI2(t, "validate", "--store", "--data", data, renamed)
	for _, want := range []string{"add consumer group a2 (fifo×1) to queue gen.out", "remove consumer group a of queue gen.out, dropping 0 unconsumed events", "create queue a2.dlq"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("renamed a: exit %d, want %q in\n%s", code, want, stdout)
		}
	}
	restrategy := write("v3.yaml", strings.Replace(string(src), "{from: gen, to: b}", "{from: gen, to: b, strategy: round_robin}", 1))
	code, stdout, _ = runCLI2(t, "validate", "--store", "--data", data, restrategy)
	if code != 0 || !strings.Contains(stdout, "change consumer group b of queue gen.out from fifo to round_robin") {
		t.Errorf("a strategy change: exit %d\n%s", code, stdout)
	}
	refused := write("v4.yaml", strings.Replace(string(src), "{from: gen, to: b}", "{from: gen, to: b, partitions: 8}", 1))
	code, stdout, stderr := runCLI2(t, "validate", "--store", "--data", data, refused)
	if code != ExitFailure || !strings.Contains(stderr, "queue gen.out has 64 partitions and the app now asks for 8") {
		t.Errorf("a refused change: exit %d\n%s%s", code, stdout, stderr)
	}
	// Nothing changed: the renamed app's check still sees group a.
	code, stdout, _ = runCLI2(t, "validate", "--store", "--json", "--data", data, renamed)
	var out struct {
		Valid bool `json:"valid"`
		Store struct {
			Changes []string `json:"changes"`
		} `json:"store"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != 0 || !out.Valid || !strings.Contains(strings.Join(out.Store.Changes, "\n"), "remove consumer group a of queue gen.out") {
		t.Errorf("validate --store --json: exit %d, %+v (%v)\n%s", code, out, err, stdout)
	}
}

// validate --store on an empty data directory creates nothing there; on a
// store a running app holds, the file is valid and the store check says
// the app is running.
func TestValidateStoreEmptyAndLocked(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app.yaml")
	src := "app: lk\nflowlets:\n  gen: {type: generator, config: {count: 10}}\n  out: {type: file_sink, config: {path: " + filepath.Join(dir, "out.txt") + "}}\nconnections:\n  - {from: gen, to: out}\n"
	if err := os.WriteFile(app, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := runCLI2(t, "validate", "--store", "--data", data, app)
	if left, _ := os.ReadDir(data); code != 0 || !strings.Contains(stdout, "none yet") || len(left) != 0 {
		t.Fatalf("empty data directory: exit %d, %d files created\n%s", code, len(left), stdout)
	}
	if code, out := runCLI(t, "run", "--drain", "--progress", "never", "--http", "off", "--no-sync", "--data", data, app); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	db, err := badger.Open(badger.DefaultOptions(data).WithLogger(nil)) // holds the store's lock, as a running app does
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	code, stdout, _ = runCLI2(t, "validate", "--store", "--json", "--data", data, app)
	var out struct {
		Valid bool `json:"valid"`
		Store struct {
			Error string `json:"error"`
		} `json:"store"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || code != ExitFailure || !out.Valid || !strings.Contains(out.Store.Error, "app is running") {
		t.Fatalf("locked store: exit %d, %+v (%v)\n%s", code, out, err, stdout)
	}
}

// The summary at the end of a run gives each flowlet's events per second
// over the run: it gave the live rate of the last second or so, 0 for a
// run shorter than that (and near 0 for one whose last second was its
// drain), whatever it processed.
func TestSummaryRateOverTheRun(t *testing.T) {
	st := runtime.Status{App: "a", Uptime: 0.5, Drained: true, Flowlets: []runtime.FlowletStatus{
		{Name: "gen", Instances: 1, Processed: 100, Rate: 0},
		{Name: "idle", Instances: 1, Processed: 0, Rate: 0},
	}}
	var b strings.Builder
	printSummary(&b, st, nil)
	rows := map[string][]string{}
	for _, l := range strings.Split(b.String(), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	if h := rows["flowlet"]; len(h) < 3 || !strings.Contains(strings.Join(h, " "), "avg events/s") {
		t.Errorf("header %q does not say the rate is the run's average\n%s", h, b.String())
	}
	for name, want := range map[string]string{"gen": "200", "idle": "0"} {
		if r := rows[name]; len(r) < 3 || r[2] != want {
			t.Errorf("%s: row %q, want %s events/s\n%s", name, r, want, b.String())
		}
	}
}
