package runtime_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// seen reads the payloads a t_count flowlet saw, with counts.
func seen(t *testing.T, a *runtime.App, fl string) map[string]int64 {
	t.Helper()
	return seenIn(t, a.View, fl)
}

// seenIn is seen through view: an App's View, or a Store's for one app.
func seenIn(t *testing.T, view func(fl string, fn func(runtime.StateReader) error) error, fl string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := view(fl, func(r runtime.StateReader) error {
		it := r.Counters("seen").Scan(flowletScanAll)
		defer it.Close()
		for it.Next() {
			out[string(it.Key())] = it.Count()
		}
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFileSourceLinesAndResume(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	huge := strings.Repeat("x", 5000)
	// empty line, CRLF kept as is, invalid UTF-8, a too-long line, a final
	// line without "\n".
	content := "a\n\nb\r\n\xff\xfe bad utf8\n" + huge + "\nc\nlast"
	os.WriteFile(in, []byte(content), 0o644)
	yaml := `
app: t
flowlets:
  src: {type: file_source, config: {path: ` + in + `, max_line_bytes: 4096, lines_per_step: 2}}
  c: {type: t_count}
connections:
  - {from: src, to: c}
`
	a := runDrain(t, dir, yaml, runtime.Options{NoSync: true})
	got := seen(t, a, "c")
	if n := counter(t, a, "c", "n", "total"); n != 6 {
		t.Errorf("total %d, want 6 lines (the long one in the DLQ)", n)
	}
	for _, l := range []string{"a", "", "b\r", "\xff\xfe bad utf8", "c", "last"} {
		if got[l] != 1 {
			t.Errorf("line %q seen %d times", l, got[l])
		}
	}
	a.Close()
	dl := deadLetters(t, filepath.Join(dir, "data"), "src")
	if len(dl) != 1 || !strings.HasPrefix(huge, string(dl[0].Payload)) || len(dl[0].Payload) < 4096 || !strings.Contains(dl[0].Error, "longer than max_line_bytes") {
		t.Fatalf("dead letters of src: %d %+v", len(dl), dl)
	}
	// Append more lines: a restart reads only them ("last" was final and
	// counted; the appended text starts a new line).
	f, _ := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("\nmore\n")
	f.Close()
	a = runDrain(t, dir, yaml, runtime.Options{NoSync: true})
	defer a.Close()
	got = seen(t, a, "c")
	if got["more"] != 1 || got["last"] != 1 || got["a"] != 1 {
		t.Errorf("after append: %v", got)
	}
}

func TestFileSourceUnreadable(t *testing.T) {
	dir := t.TempDir()
	_, err := runtime.Open(plan(t, dir, `
app: t
flowlets:
  src: {type: file_source, config: {path: /nonexistent/in.txt}}
  c: {type: t_count}
connections:
  - {from: src, to: c}
`), runtime.Options{DataDir: filepath.Join(dir, "data")})
	if err == nil || !strings.Contains(err.Error(), "cannot read input file") || !strings.Contains(err.Error(), "/nonexistent/in.txt") {
		t.Fatalf("err = %v", err)
	}
}

func TestFileSinkIdempotentAfterCrash(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	yaml := `
app: t
flowlets:
  gen: {type: generator, config: {count: 500, payload: "r{seq}"}}
  sink: {type: file_sink, config: {path: ` + out + `, fsync: false}}
connections:
  - {from: gen, to: sink}
`
	a := runDrain(t, dir, yaml, runtime.Options{NoSync: true})
	a.Close()
	good, _ := os.ReadFile(out)
	if n := bytes.Count(good, []byte("\n")); n != 500 {
		t.Fatalf("%d lines, want 500", n)
	}
	// A publish that appended but died before its commit leaves bytes past
	// the recorded size: the next run must drop them.
	f, _ := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("r7\nr8\npartial")
	f.Close()
	a = runDrain(t, dir, yaml, runtime.Options{NoSync: true})
	a.Close()
	again, _ := os.ReadFile(out)
	if !bytes.Equal(again, good) {
		t.Fatalf("file after recovery differs: %d bytes vs %d", len(again), len(good))
	}
	// A file shorter than what was committed is an error, not a silent rewrite.
	os.WriteFile(out, []byte("r0\n"), 0o644)
	a, err := runtime.Open(plan(t, dir, yaml), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data"), Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "truncated or replaced") {
		t.Fatalf("run with a truncated sink file: %v", err)
	}
}

func TestHTTPSourceAcksAfterCommit(t *testing.T) {
	dir := t.TempDir()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	a, err := runtime.Open(plan(t, dir, `
app: t
flowlets:
  in: {type: http_source, config: {addr: "`+addr+`", path: /ingest}}
  c: {type: t_count}
connections:
  - {from: in, to: c}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithCancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	resp, err := http.Post("http://"+addr+"/ingest", "text/plain", strings.NewReader("x1\nx2\r\n\nx3"))
	if err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(body.String(), `"accepted":3`) {
		t.Fatalf("POST: %d %s", resp.StatusCode, body)
	}
	// Acknowledged means committed: the events are in the queue now.
	deadline := time.Now().Add(10 * time.Second)
	for counter(t, a, "c", "n", "total") != 3 {
		if time.Now().After(deadline) {
			t.Fatal("acknowledged events did not arrive")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, err := http.Get("http://" + addr + "/ingest"); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %v %v", resp, err)
	}
	// Only the configured path ingests.
	for _, other := range []string{"/ingest/x", "/other", "/"} {
		resp, err := http.Post("http://"+addr+other, "text/plain", strings.NewReader("nope"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("POST %s: %d, want 404", other, resp.StatusCode)
		}
	}
	if n := counter(t, a, "c", "n", "total"); n != 3 {
		t.Errorf("total %d after posts to other paths, want 3", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	a.Close()
}

func TestDLQReplay(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	yaml := `
app: t
flowlets:
  gen: {type: generator, config: {count: 50, payload: "e{seq}.", keys: {k: "{mod:5}"}}}
  c: {type: t_count, instances: 2, retries: {max: 0}, config: {fail: "${FAIL:e1.}"}}
connections:
  - {from: gen, to: c, strategy: hash, key: k}
`
	a := runDrain(t, dir, yaml, runtime.Options{NoSync: true, DataDir: data})
	a.Close()
	if dl := deadLetters(t, data, "c"); len(dl) != 1 || string(dl[0].Payload) != "e1." || len(dl[0].Keys) != 1 {
		t.Fatalf("dead letters: %+v", dl)
	}
	p := plan(t, dir, yaml)
	r, k, err := replayDeadLetters(t, data, "c", map[string]string{"gen.out": "k"})
	if err != nil || r != 1 || k != 0 {
		t.Fatalf("replay: %d %d %v", r, k, err)
	}
	if dl := deadLetters(t, data, "c"); len(dl) != 0 {
		t.Fatalf("DLQ after replay: %+v", dl)
	}
	// Until its next run the replayed event waits in the replay queue,
	// which holds dead-letter records as the DLQ does: a tail shows it
	// (it failed with "malformed event envelope").
	s, err := runtime.OpenStore(data)
	if err != nil {
		t.Fatal(err)
	}
	var tail []runtime.QueueEntry
	err = s.Scan(runtime.ReplayName("c"), "", 0, func(e runtime.QueueEntry) bool { tail = append(tail, e); return true })
	s.Close()
	if err != nil || len(tail) != 1 || string(tail[0].Payload) != "e1." || tail[0].Dead == nil || tail[0].Dead.Input != "gen.out" || len(tail[0].Keys) != 1 {
		t.Fatalf("tail of the replay queue: %+v, %v", tail, err)
	}
	// The bug is fixed: the replayed event is processed once.
	t.Setenv("FAIL", "nothing")
	_ = p
	a = runDrain(t, dir, yaml, runtime.Options{NoSync: true, DataDir: data})
	defer a.Close()
	if n := counter(t, a, "c", "seen", "e1."); n != 1 {
		t.Errorf("replayed event seen %d times", n)
	}
	if n := counter(t, a, "c", "n", "total"); n != 50 {
		t.Errorf("total %d, want 50", n)
	}
}

func TestBadInputCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("child process")
	}
	dir := t.TempDir()
	cases := []struct {
		name, yaml string
		args       []string
		want       []string
	}{
		{"malformed yaml", "app: t\nflowlets:\n  a: {type: generator\n", []string{"validate"}, []string{"app.yaml:"}},
		{"unknown type", "app: t\nflowlets:\n  a:\n    type: genrator\n", []string{"lint"}, []string{"app.yaml:4:11:", "genrator"}},
		{"unreadable input", "app: t\nflowlets:\n  a: {type: file_source, config: {path: /nonexistent}}\n  b: {type: stdout_sink}\nconnections:\n  - {from: a, to: b}\n", []string{"run", "--data", filepath.Join(dir, "d")}, []string{"cannot read input file", "/nonexistent"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			writeApp(t, dir, c.yaml)
			args := append([]string{c.args[0], "app.yaml"}, c.args[1:]...)
			out, err := cliCmd(t, dir, args...).CombinedOutput()
			if err == nil {
				t.Fatalf("exit 0:\n%s", out)
			}
			if ee, ok := err.(interface{ ExitCode() int }); !ok || ee.ExitCode() != 1 {
				t.Errorf("exit %v, want 1", err)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "panic") {
				t.Errorf("panic:\n%s", out)
			}
		})
	}
}

// With the default path "/" the source ingests POSTs to "/" only, not to
// every path; a path that is not a URL path is a config error at planning.
func TestHTTPSourceDefaultPathIsExact(t *testing.T) {
	dir := t.TempDir()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	app := func(extra string) string {
		return `
app: t
flowlets:
  in: {type: http_source, config: {addr: "` + addr + `"` + extra + `}}
  c: {type: t_count}
connections:
  - {from: in, to: c}
`
	}
	if _, err := runtime.ParseFile(writeApp(t, dir, app(", path: ingest"))); err == nil || !strings.Contains(err.Error(), `config field "path": want a clean URL path such as /ingest`) {
		t.Errorf("path without a leading /: %v", err)
	}
	runApp(t, plan(t, dir, app("")), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data")})
	post := func(path string) int {
		t.Helper()
		resp, err := http.Post("http://"+addr+path, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/other"); code != http.StatusNotFound {
		t.Errorf("POST /other: %d, want 404", code)
	}
	if code := post("/"); code != http.StatusOK {
		t.Errorf("POST /: %d, want 200", code)
	}
}

// A file_sink whose path changed under a store with committed output says
// so, naming both files, instead of reporting the new file as truncated.
func TestFileSinkPathChanged(t *testing.T) {
	dir := t.TempDir()
	runDrain(t, dir, sinkApp(filepath.Join(dir, "one.txt"), 10), runtime.Options{NoSync: true}).Close()
	a, err := runtime.Open(plan(t, dir, sinkApp(filepath.Join(dir, "two.txt"), 10)), runtime.Options{NoSync: true, Drain: true, DataDir: filepath.Join(dir, "data")})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = a.Run(ctx)
		cancel()
		a.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "went to "+filepath.Join(dir, "one.txt")+", which still exists, and path is now "+filepath.Join(dir, "two.txt")) {
		t.Fatalf("got %v, want the path-changed error", err)
	}
}

// The same file under another name (a symlink) is not a changed path.
func TestFileSinkSameFileOtherName(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	runDrain(t, dir, sinkApp(filepath.Join(dir, "real/out.txt"), 10), runtime.Options{NoSync: true}).Close()
	runDrain(t, dir, sinkApp(filepath.Join(dir, "link/out.txt"), 20), runtime.Options{NoSync: true}).Close()
	b, err := os.ReadFile(filepath.Join(dir, "real", "out.txt"))
	if err != nil || strings.Count(string(b), "\n") != 20 {
		t.Fatalf("out.txt: %d lines, %v; want 20", strings.Count(string(b), "\n"), err)
	}
}

// A project moved as a whole (data and output together) runs on: the old
// path is gone, and the file at the new one has the committed size.
func TestFileSinkMovedProject(t *testing.T) {
	root := t.TempDir()
	app := func(dir string, count int) string { return sinkApp(filepath.Join(dir, "out.txt"), count) }
	one, two := filepath.Join(root, "one"), filepath.Join(root, "two")
	if err := os.Mkdir(one, 0o755); err != nil {
		t.Fatal(err)
	}
	runDrain(t, one, app(one, 10), runtime.Options{NoSync: true}).Close()
	if err := os.Rename(one, two); err != nil {
		t.Fatal(err)
	}
	runDrain(t, two, app(two, 20), runtime.Options{NoSync: true}).Close()
	b, err := os.ReadFile(filepath.Join(two, "out.txt"))
	if err != nil || strings.Count(string(b), "\n") != 20 {
		t.Fatalf("out.txt: %d lines, %v; want 20", strings.Count(string(b), "\n"), err)
	}
}

// A file_sink appends to a file that already holds data (it does not take
// the data for its own unfinished publish and cut it off), and a second app
// writing the same file fails to start while the first holds it.
func TestFileSinkKeepsExistingDataAndLocks(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(out, []byte("precious 1\nprecious 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	app := sinkApp(out, 3)
	a := runDrain(t, dir, app, runtime.Options{NoSync: true})
	b, err := os.ReadFile(out)
	if err != nil || string(b) != "precious 1\nprecious 2\nevent 0\nevent 1\nevent 2\n" {
		t.Fatalf("out.txt = %q, %v; want the old lines, then the events", b, err)
	}
	// a is open (its sink holds the file): another app on the same file.
	other := filepath.Join(t.TempDir(), "data")
	_, err = runtime.Open(plan(t, t.TempDir(), app), runtime.Options{NoSync: true, DataDir: other})
	if err == nil || !strings.Contains(err.Error(), "is being written by another running app") {
		t.Fatalf("second app on the same file: %v, want the lock error", err)
	}
	a.Close()
	// Closed, the file is free; a restart of the first app appends nothing twice.
	runDrain(t, dir, app, runtime.Options{NoSync: true}).Close()
	if b, _ := os.ReadFile(out); strings.Count(string(b), "\n") != 5 {
		t.Fatalf("after a restart: %q", b)
	}
}

// sinkApp is a generator of count events into a file_sink writing path.
func sinkApp(path string, count int) string {
	return fmt.Sprintf(`
app: t
flowlets:
  gen: {type: generator, config: {count: %d}}
  out: {type: file_sink, config: {path: %s}}
connections:
  - {from: gen, to: out}
`, count, path)
}
