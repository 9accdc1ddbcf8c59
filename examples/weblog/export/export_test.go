package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/examples/weblog/verify/expect"
	"github.com/flowrun/flowrun/planner"
	"github.com/flowrun/flowrun/runtime"
	_ "github.com/flowrun/flowrun/runtime/builtin"
)

// fakeStore holds counters and tables per "flowlet/table".
type fakeStore struct {
	counters map[string]map[string]int64
	tables   map[string]map[string]string
	dlq      map[string]int64
	dup      bool // list the first counter twice
}

func (f *fakeStore) ScanCounters(fl, table string, fn func([]byte, int64) error) error {
	for k, v := range f.counters[fl+"/"+table] {
		if err := fn([]byte(k), v); err != nil {
			return err
		}
		if f.dup {
			if err := fn([]byte(k), v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *fakeStore) ScanTable(fl, table string, fn func([]byte, []byte) error) error {
	for k, v := range f.tables[fl+"/"+table] {
		if err := fn([]byte(k), []byte(v)); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeStore) DLQLen(fl string) (int64, error) {
	n, ok := f.dlq[fl]
	if !ok {
		return 0, errors.New("no such flowlet")
	}
	return n, nil
}

func (f *fakeStore) DeadLetters(fl string, fn func([]byte) error) error {
	for i := int64(0); i < f.dlq[fl]; i++ {
		if err := fn([]byte(fmt.Sprintf("%s bad %d\r", fl, i))); err != nil {
			return err
		}
	}
	return nil
}

func testPlan(t *testing.T, extra string) *planner.Plan {
	t.Helper()
	src := `app: w
flowlets:
  src: {type: file_source}
  p1: {type: weblog_parser}
  p2: {type: weblog_parser}
  pv: {type: weblog_page_views}
  uv: {type: weblog_unique_visitors}
  sc: {type: weblog_status_counts}
  bh: {type: weblog_bytes_per_hour}
` + extra
	plan, err := planner.Parse("t.yaml", []byte(src), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func TestExport(t *testing.T) {
	roles, err := FindRoles(testPlan(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	longPath := "/" + strings.Repeat("x", 5000)
	lk, _ := flowlets.CounterKey([]byte(longPath))
	s := &fakeStore{
		counters: map[string]map[string]int64{
			"pv/views":  {"/a": 3, string(lk): 2},
			"uv/hits":   {"1.2.3.4": 5},
			"sc/counts": {"200": 4, "404": 1},
			"bh/lines":  {"2026-11-21T13": 3, "2026-11-21T14": 2},
			"bh/bytes":  {"2026-11-21T13": 10},
		},
		tables: map[string]map[string]string{"pv/long_keys": {string(lk): longPath}},
		dlq:    map[string]int64{"p1": 2, "p2": 3},
	}
	res, err := Export(roles, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.PageViews) != 2 || res.PageViews["/a"] != 3 || res.PageViews[longPath] != 2 {
		t.Errorf("page views %v", res.PageViews)
	}
	if len(res.BytesPerHour) != 2 || res.BytesPerHour["2026-11-21T13"] != 10 || res.BytesPerHour["2026-11-21T14"] != 0 {
		t.Errorf("bytes per hour %v", res.BytesPerHour)
	}
	if len(res.LinesPerHour) != 2 || res.LinesPerHour["2026-11-21T13"] != 3 || res.LinesPerHour["2026-11-21T14"] != 2 {
		t.Errorf("lines per hour %v", res.LinesPerHour)
	}
	if res.Malformed != 5 || res.Visitors["1.2.3.4"] != 5 || res.StatusCounts["404"] != 1 {
		t.Errorf("%+v", res)
	}

	var b bytes.Buffer
	if n, err := WriteDeadLetters(roles, s, &b); err != nil || n != 5 || b.String() != "p1 bad 0\r\np1 bad 1\r\np2 bad 0\r\np2 bad 1\r\np2 bad 2\r\n" {
		t.Errorf("dead letters %d %v %q", n, err, b.String())
	}

	// Broken states are reported, not exported.
	s.tables = nil
	if _, err := Export(roles, s); err == nil || !strings.Contains(err.Error(), "long key") {
		t.Errorf("missing long key value: %v", err)
	}
	s.tables = map[string]map[string]string{"pv/long_keys": {string(lk): "/other"}}
	if _, err := Export(roles, s); err == nil {
		t.Error("long key value that does not hash to its key accepted")
	}
	s.tables = map[string]map[string]string{"pv/long_keys": {string(lk): longPath}}
	s.counters["bh/bytes"]["2026-11-21T15"] = 7
	if _, err := Export(roles, s); err == nil {
		t.Error("bytes without lines accepted")
	}
	delete(s.counters["bh/bytes"], "2026-11-21T15")
	s.counters["bh/lines"]["2026-11-21T15"] = -1
	if _, err := Export(roles, s); err == nil {
		t.Error("negative lines accepted")
	}
	delete(s.counters["bh/lines"], "2026-11-21T15")
	s.dup = true
	if _, err := Export(roles, s); err == nil {
		t.Error("duplicate counter key accepted")
	}
	s.dup = false
	delete(s.dlq, "p2")
	if _, err := Export(roles, s); err == nil {
		t.Error("DLQ error ignored")
	}
}

func TestFindRoles(t *testing.T) {
	r, err := FindRoles(testPlan(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.Parsers, ",") != "p1,p2" || r.PageViews != "pv" || r.Visitors != "uv" || r.StatusCounts != "sc" || r.BytesPerHour != "bh" {
		t.Errorf("%+v", r)
	}
	// What feeds a parser is a reader, once.
	r, err = FindRoles(testPlan(t, "connections:\n  - {from: src, to: p1}\n  - {from: src, to: p2}\n  - {from: p1.pages, to: pv}\n"))
	if err != nil || strings.Join(r.Readers, ",") != "src" {
		t.Errorf("readers %q, want src: %v", r.Readers, err)
	}
	// The parser plugin is a parser.
	r, err = FindRoles(testPlan(t, "  p3: {plugin: ../plugins/weblogparser}\n  other: {plugin: ./elsewhere}\n"))
	if err != nil || strings.Join(r.Parsers, ",") != "p1,p2,p3" {
		t.Errorf("with the parser plugin: %+v, %v", r, err)
	}
	_, err = FindRoles(testPlan(t, "  pv2: {type: weblog_page_views}\n"))
	if err == nil || !strings.Contains(err.Error(), "2 flowlets of type weblog_page_views (pv, pv2)") {
		t.Errorf("two page view flowlets: %v", err)
	}
	plan, err := planner.Parse("t.yaml", []byte("app: w\nflowlets:\n  p: {type: weblog_parser}\n"), planner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FindRoles(plan); err == nil || !strings.Contains(err.Error(), "no flowlet of type weblog_bytes_per_hour") {
		t.Errorf("missing roles: %v", err)
	}
}

// violationLog has two lines in hour 13, one of them of 0 bytes (a 304),
// one in hour 14 and a malformed one.
const violationLog = `203.0.113.7 - - [21/Nov/2026:13:55:36 +0000] "GET /a HTTP/1.1" 200 100 "-" "-"
203.0.113.7 - - [21/Nov/2026:13:55:37 +0000] "GET /a HTTP/1.1" 304 - "-" "-"
2001:db8::1 - - [21/Nov/2026:14:00:00 +0000] "GET /b HTTP/1.1" 404 7 "-" "-"
garbage
`

// violationStore is the state an exactly-once run over violationLog leaves.
func violationStore() *fakeStore {
	return &fakeStore{
		counters: map[string]map[string]int64{
			"pv/views":  {"/a": 2, "/b": 1},
			"uv/hits":   {"203.0.113.7": 2, "2001:db8::1": 1},
			"sc/counts": {"200": 1, "304": 1, "404": 1},
			"bh/lines":  {"2026-11-21T13": 2, "2026-11-21T14": 1},
			"bh/bytes":  {"2026-11-21T13": 100, "2026-11-21T14": 7},
		},
		dlq: map[string]int64{"p1": 1, "p2": 0},
	}
}

// verifyExport exports s as the export command does and has the
// independent verifier compare it with what violationLog should give.
func verifyExport(t *testing.T, roles Roles, s Store) []expect.Diff {
	t.Helper()
	res, err := Export(roles, s)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return verifyJSON(t, js, []byte(violationLog))
}

// verifyJSON has the independent verifier compare exported results with
// what log should give.
func verifyJSON(t *testing.T, js, log []byte) []expect.Diff {
	t.Helper()
	got, err := expect.ReadResults(bytes.NewReader(js))
	if err != nil {
		t.Fatalf("exported results not in the verifier's format: %v\n%s", err, js)
	}
	want, _, err := expect.Compute(bytes.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	return expect.Compare(want, got)
}

// TestVerifierCatchesHourViolations: an exactly-once violation in the
// bytes-per-hour counters must fail the verification, also when it only
// shows in the lines of an hour: a 0-byte line counted twice, lost, or
// counted in the wrong hour leaves every byte sum as it was.
func TestVerifierCatchesHourViolations(t *testing.T) {
	roles, err := FindRoles(testPlan(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if d := verifyExport(t, roles, violationStore()); len(d) != 0 {
		t.Fatalf("the exactly-once state fails the verification: %v", d)
	}
	for name, lines := range map[string]map[string]int64{
		"0-byte line counted twice":        {"2026-11-21T13": 3, "2026-11-21T14": 1},
		"0-byte line lost":                 {"2026-11-21T13": 1, "2026-11-21T14": 1},
		"0-byte line counted in hour 14":   {"2026-11-21T13": 1, "2026-11-21T14": 2},
		"hour 14 line counted three times": {"2026-11-21T13": 2, "2026-11-21T14": 3},
	} {
		s := violationStore()
		s.counters["bh/lines"] = lines
		if d := verifyExport(t, roles, s); len(d) == 0 {
			t.Errorf("%s: the verifier passes it", name)
		}
	}
}

// TestLineOverReaderLimitIsMalformed runs app-builtin.yaml over a log with a
// line longer than the reader's max_line_bytes (1 MiB at most), which the
// reader dead-letters itself, so the parser never sees it: it is still one
// malformed line of the log, and the exported results must say so.
func TestLineOverReaderLimitIsMalformed(t *testing.T) {
	dir := t.TempDir()
	ok := `203.0.113.7 - - [21/Nov/2026:13:55:36 +0000] "GET /a HTTP/1.1" 200 100 "-" "-"`
	huge := `203.0.113.7 - - [21/Nov/2026:13:55:36 +0000] "GET /` + strings.Repeat("x", 1<<20) + ` HTTP/1.1" 200 1 "-" "-"`
	log := []byte(ok + "\n" + huge + "\n" + ok + "\ngarbage\n")
	logFile, data := filepath.Join(dir, "access.log"), filepath.Join(dir, "data")
	if err := os.WriteFile(logFile, log, 0o644); err != nil {
		t.Fatal(err)
	}
	const app = "../app-builtin.yaml"
	env := map[string]string{"WEBLOG_INPUT": logFile, "WEBLOG_HOURS": filepath.Join(dir, "hours.jsonl")}
	plan, err := planner.ParseFile(app, planner.Options{Types: runtime.PlannerTypes(),
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	a, err := runtime.Open(plan, runtime.Options{DataDir: data, NoSync: true, Drain: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := errors.Join(a.Run(ctx), a.Close()); err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := export(app, data, "", "", &js); err != nil {
		t.Fatal(err)
	}
	if d := verifyJSON(t, js.Bytes(), log); len(d) != 0 {
		t.Errorf("results differ from the verifier's: %v", d)
	}
}
