package planner

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden and *.dot from the current output")

// testEnv is the whole environment the golden files see.
var testEnv = map[string]string{
	"FLOWRUN_TEST_INPUT":     "/var/log/nginx/access.log",
	"FLOWRUN_TEST_INSTANCES": "4",
	"FLOWRUN_TEST_EMPTY":     "",
	"FLOWRUN_TEST_STRATEGY":  "hash",
}

func testLookup(name string) (string, bool) {
	v, ok := testEnv[name]
	return v, ok
}

// testTypes stands in for the built-in flowlet registry.
var testTypes = map[string]TypeInfo{
	"file_source": {Source: true, Outputs: []string{"out", "errors"}},
	"http_source": {Source: true},
	"counter":     {Outputs: []string{"out"}},
	"filter":      {},
	"kv_sink":     {Sink: true},
	"log_sink":    {Sink: true},
}

func testOptions() Options {
	return Options{LookupEnv: testLookup, Types: testTypes}
}

// TestGolden plans every testdata/*.yaml. A good file's golden is its
// Plan.Text() (and its .dot the Plan.DOT()); a bad file's golden is every
// error, one per line. Files named bad_* must fail and all others succeed,
// so a broken check cannot silently turn a bad file into a good one.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			wantBad := strings.HasPrefix(name, "bad_")
			plan, err := ParseFile(file, testOptions())
			var got, gotDOT string
			switch {
			case err != nil:
				var list ErrorList
				if !errors.As(err, &list) {
					t.Fatalf("error is %T, want ErrorList: %v", err, err)
				}
				got = err.Error() + "\n"
			default:
				got = plan.Text()
				gotDOT = plan.DOT()
			}
			if wantBad != (err != nil) {
				t.Errorf("bad file: %v, but got error: %v", wantBad, err)
			}
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			compareGolden(t, golden, got)
			if !wantBad {
				compareGolden(t, strings.TrimSuffix(file, ".yaml")+".dot", gotDOT)
			}
		})
	}
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./planner -run TestGolden -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept)\n--- got\n%s--- want\n%s", path, got, want)
	}
}
