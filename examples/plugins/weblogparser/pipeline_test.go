package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/examples/weblog/verify/expect"
	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/pluginhost"
	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
	_ "github.com/flowrun/flowrun/runtime/builtin"
)

// pluginType is the weblog parser plugin registered as a flowlet type for
// these tests, with every instance it made (to find their processes).
type pluginType struct {
	name string
	p    *pluginhost.Plugin
	mu   sync.Mutex
	made []flowlet.Flowlet
}

var (
	regOnce sync.Once
	regType *pluginType
	regErr  error
)

// registered builds and registers the plugin once per test binary, as
// "weblog_parser_plugin", so that the test can reach the instances' processes
// (their PIDs). An app file says `plugin: ../plugins/weblogparser` instead,
// and the runtime does the same with pluginhost.Open (examples/weblog/app.yaml,
// whose e2e test kills the plugin processes from outside).
func registered(t testing.TB) *pluginType {
	regOnce.Do(func() {
		pt := &pluginType{name: "weblog_parser_plugin"}
		pt.p, regErr = pluginhost.Open(context.Background(), "parser", ".", ".", pluginhost.Options{
			CacheDir: filepath.Join(os.TempDir(), "flowrun-plugin-test-cache"), RestartBackoff: time.Millisecond,
			MaxRestartBackoff: 50 * time.Millisecond,
		})
		if regErr != nil {
			return
		}
		flowlet.Register(pt.name, func() flowlet.Flowlet {
			f := pt.p.New()
			pt.mu.Lock()
			pt.made = append(pt.made, f)
			pt.mu.Unlock()
			return f
		}, pt.p.Info())
		regType = pt
	})
	if regErr != nil {
		t.Fatal(regErr)
	}
	return regType
}

func (pt *pluginType) pids() []int {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	var out []int
	for _, f := range pt.made {
		if id := f.(interface{ PID() int }).PID(); id != 0 {
			out = append(out, id)
		}
	}
	return out
}

const appYAML = `
app: weblog_plugin
flowlets:
  reader:
    type: file_source
    config:
      path: %q
  parser:
    type: %s
    instances: 2
    batch_size: %d
    retries: {max: 1000, backoff: 1ms, max_backoff: 20ms}
  page_views:
    type: weblog_page_views
    instances: 2
    batch_size: 1000
  unique_visitors:
    type: weblog_unique_visitors
    batch_size: 1000
  status_counts:
    type: weblog_status_counts
    batch_size: 1000
  bytes_per_hour:
    type: weblog_bytes_per_hour
    batch_size: 1000
connections:
  - {from: reader, to: parser, strategy: round_robin}
  - {from: parser.pages, to: page_views, strategy: hash, key: path}
  - {from: parser.visitors, to: unique_visitors, strategy: hash, key: ip}
  - {from: parser.status, to: status_counts}
  - {from: parser.bytes, to: bytes_per_hour}
`

// runApp runs the weblog app over the log at path, with the parser of type
// parserType, until drained, and returns its results and how long it ran.
// during runs while the app does and is cancelled when it ends.
func runApp(t testing.TB, path, parserType string, batch int, during func(ctx context.Context)) (*expect.Results, time.Duration) {
	t.Helper()
	src := fmt.Sprintf(appYAML, path, parserType, batch)
	plan, err := planner.Parse("app.yaml", []byte(src), planner.Options{Types: runtime.PlannerTypes()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var logs bytes.Buffer
	app, err := runtime.Open(plan, runtime.Options{DataDir: dir, NoSync: true, Drain: true,
		Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if during != nil {
		wg.Go(func() { during(dctx) })
	}
	start := time.Now()
	err = app.Run(ctx)
	took := time.Since(start)
	stop()
	wg.Wait()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the app did not drain within %v", 5*time.Minute)
	}
	got := expect.NewResults()
	read := func(fl, table string, into map[string]int64) {
		err := app.View(fl, func(st runtime.StateReader) error {
			it := st.Counters(table).Scan(flowlet.ScanOptions{})
			for it.Next() {
				// A key listed twice is a broken scan, not a sum to make.
				if _, dup := into[string(it.Key())]; dup {
					t.Errorf("%s: counters %s: key %q listed twice", fl, table, it.Key())
				}
				into[string(it.Key())] = it.Count()
			}
			return errors.Join(it.Err(), it.Close())
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	read("page_views", flowlets.ViewsCounters, got.PageViews)
	read("unique_visitors", flowlets.HitsCounters, got.Visitors)
	read("status_counts", flowlets.StatusCounters, got.StatusCounts)
	lines := map[string]int64{}
	read("bytes_per_hour", flowlets.LinesCounters, lines)
	nbytes := map[string]int64{}
	read("bytes_per_hour", flowlets.BytesCounters, nbytes)
	for h, n := range lines {
		if n > 0 {
			got.BytesPerHour[h] = nbytes[h]
			got.LinesPerHour[h] = n
		}
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := runtime.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got.Malformed, err = st.DLQSize("parser"); err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() && logs.Len() > 0 {
		l := logs.String()
		t.Logf("runtime warnings: %d lines, e.g.\n%s", strings.Count(l, "\n"), firstLines(l, 3))
	}
	return got, took
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	return strings.Join(ls[:min(n, len(ls))], "\n")
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func writeLog(t testing.TB, lines [][]byte) (string, *expect.Results) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access.log")
	data := append(bytes.Join(lines, []byte("\n")), '\n')
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	want, _, err := expect.Compute(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return path, want
}

func checkResults(t testing.TB, want, got *expect.Results) {
	t.Helper()
	if diffs := expect.Compare(want, got); len(diffs) > 0 {
		var b strings.Builder
		expect.Report(&b, want, got, diffs, 20)
		t.Fatalf("results differ from the verifier's:\n%s", b.String())
	}
}

// TestPipelineKills runs the weblog app with the parser as a plugin (two
// instances, two processes) and kills a parser process with SIGKILL at
// least 20 times while it runs: every kill aborts the step in flight, the
// host restarts the plugin and the events come again, and the results equal
// the independent verifier's exactly (nothing lost, nothing counted twice;
// malformed lines dead-lettered once each).
func TestPipelineKills(t *testing.T) {
	pt := registered(t)
	lines := 60000
	if testing.Short() {
		lines = 20000
	}
	const minKills, maxKills = 20, 25
	// The app must not drain before the 20th kill; on a fast moment it can,
	// so a short run is repeated with twice the lines (each run is checked).
	for attempt := 1; ; attempt++ {
		path, want := writeLog(t, genLines(lines, 0.01, 42))
		if want.Malformed == 0 || len(want.LinesPerHour) < 2 {
			t.Fatalf("the log has %d malformed lines and %d hours: nothing to check", want.Malformed, len(want.LinesPerHour))
		}
		kills := 0
		r := rand.New(rand.NewPCG(42, uint64(attempt)))
		got, took := runApp(t, path, pt.name, 500, func(ctx context.Context) {
			killed := map[int]bool{}
			for ctx.Err() == nil && kills < maxKills {
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(40+r.IntN(80)) * time.Millisecond):
				}
				pids := pt.pids()
				if len(pids) == 0 {
					continue
				}
				id := pids[r.IntN(len(pids))]
				if killed[id] || ctx.Err() != nil {
					continue
				}
				if syscall.Kill(id, syscall.SIGKILL) == nil {
					killed[id] = true
					kills++
				}
			}
		})
		t.Logf("%d lines in %v with %d plugin kills", lines, took.Round(time.Millisecond), kills)
		checkResults(t, want, got)
		if kills >= minKills {
			return
		}
		if attempt == 3 {
			t.Fatalf("only %d kills before the app drained (want ≥ %d), %d lines", kills, minKills, lines)
		}
		lines *= 2
	}
}

// BenchmarkPipeline runs the whole weblog app (file source, parser with two
// instances, four counting flowlets; NoSync store) over the same 20,000-line
// log with the parser in process and as a plugin, at parser batch sizes 1,
// 100 and 500, and prints the plugin's throughput as a share of the
// in-process one. Every run's results are checked against the verifier.
//
//	go test -run '^$' -bench Pipeline -benchtime 1x ./examples/plugins/weblogparser
func BenchmarkPipeline(b *testing.B) {
	pt := registered(b)
	path, want := writeLog(b, genLines(20000, 0.01, 9))
	rate := map[string]float64{}
	sizes := []int{1, 100, 500}
	for _, n := range sizes {
		for _, mode := range []string{"in-process", "plugin"} {
			typ := flowlets.TypeParser
			if mode == "plugin" {
				typ = pt.name
			}
			b.Run(fmt.Sprintf("batch=%d/%s", n, mode), func(b *testing.B) {
				var total time.Duration
				for range b.N {
					got, took := runApp(b, path, typ, n, nil)
					checkResults(b, want, got)
					total += took
				}
				r := float64(20000*b.N) / total.Seconds()
				b.ReportMetric(r, "lines/s")
				b.ReportMetric(0, "ns/op")
				rate[fmt.Sprintf("%d/%s", n, mode)] = r
			})
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nweblog app (whole pipeline), parser as plugin vs in process:\n")
	fmt.Fprintf(&sb, "%8s %16s %16s %8s\n", "batch", "in-process l/s", "plugin l/s", "ratio")
	for _, n := range sizes {
		in, pl := rate[fmt.Sprintf("%d/in-process", n)], rate[fmt.Sprintf("%d/plugin", n)]
		if in == 0 || pl == 0 {
			continue
		}
		fmt.Fprintf(&sb, "%8d %16.0f %16.0f %7.1f%%\n", n, in, pl, 100*pl/in)
	}
	fmt.Fprint(os.Stdout, sb.String())
}
