package cli

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

// testReject dead-letters every event it is given.
type testReject struct{}

func (testReject) Process(flowlet.Context, flowlet.Event) error {
	return flowlet.Permanent(errors.New("rejected"))
}

// testKeep keeps each payload in the table "all", under prefix and its
// part before ':'.
type testKeep struct{ prefix string }

func (f testKeep) Process(ctx flowlet.Context, ev flowlet.Event) error {
	k, _, _ := bytes.Cut(ev.Payload, []byte(":"))
	return ctx.State("all").Put(append([]byte(f.prefix), k...), ev.Payload)
}

func init() {
	flowlet.Register("clitest_reject", func() flowlet.Flowlet { return testReject{} }, flowlet.TypeInfo{Sink: true, Doc: "test: rejects every event"})
	flowlet.Register("clitest_keep", func() flowlet.Flowlet { return testKeep{} }, flowlet.TypeInfo{Sink: true, Doc: "test: keeps every payload"})
	flowlet.Register("clitest_keep_odd", func() flowlet.Flowlet { return testKeep{prefix: "\x00\t"} }, flowlet.TypeInfo{Sink: true, Doc: "test: keeps every payload under a key that does not print"})
}

// bigEvents is an app of events events of size bytes each (about) from a
// generator to the sink type sink, run to its end in data.
func bigEvents(t testing.TB, events, size int, sink string) (app, data string) {
	t.Helper()
	return drainedApp(t, fmt.Sprintf(`app: big
flowlets:
  gen: {type: generator, config: {count: %d, payload: "{seq}:%s"}}
  sink: {type: %s}
connections:
  - {from: gen, to: sink}
`, events, strings.Repeat("x", size), sink))
}

// drainedApp writes the app file src and runs it to its end (--drain) in a
// new data directory.
func drainedApp(t testing.TB, src string) (app, data string) {
	t.Helper()
	dir := t.TempDir()
	data = filepath.Join(dir, "data")
	app = writeApp(t, dir, "app.yaml", src)
	if code, out := runCLI(t, "run", "--drain", "--progress", "never", "--no-sync", "--http", "off", "--data", data, app); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, out)
	}
	return app, data
}

// TestOfflineListingsByteBound: queue tail -n 0 and dlq ls of a store
// holding more than runtime.MaxListBytes list only what fits (the newest
// entries, the first dead letters) and say on stderr that they were cut,
// as the HTTP API does; they built every entry in the CLI's memory.
func TestOfflineListingsByteBound(t *testing.T) {
	const events, size = 12, runtime.MaxListBytes / 10 // 12 events: 9.6 MiB
	app, data := bigEvents(t, events, size, "clitest_reject")
	for _, args := range [][]string{
		{"queue", "tail", "-n", "0", "--json", "--data", data, app, runtime.DLQName("sink")},
		{"dlq", "ls", "--json", "--data", data, app},
	} {
		code, stdout, stderr := runCLI2(t, args...)
		var list []struct{ Payload runtime.Bytes }
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", args[:2], code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &list); err != nil {
			t.Fatalf("%s: %v", args[:2], err)
		}
		held := 0
		for _, e := range list {
			held += len(e.Payload.Raw())
		}
		if len(list) == 0 || held > runtime.MaxListBytes || !strings.Contains(stderr, "truncated") {
			t.Errorf("%s of %d events of %d bytes: %d listed, %d bytes; stderr %q; want at most %d bytes and a note",
				args[:2], events, size, len(list), held, stderr, runtime.MaxListBytes)
		}
	}
}

// TestOfflineStateScanByteBound: state scan of a table holding more than
// runtime.MaxListBytes lists the keys that fit and says where the rest
// begins (--start goes on from there), as the HTTP API does; it built the
// whole table in the CLI's memory.
func TestOfflineStateScanByteBound(t *testing.T) {
	const events, size = 12, runtime.MaxListBytes / 10
	app, data := bigEvents(t, events, size, "clitest_keep")
	code, stdout, stderr := runCLI2(t, "state", "scan", "--json", "--data", data, app, "sink", "all")
	var tables []runtime.StateTable
	if code != 0 {
		t.Fatalf("state scan: exit %d\n%s", code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), &tables); err != nil || len(tables) != 1 {
		t.Fatalf("state scan: %v, %d tables", err, len(tables))
	}
	held := 0
	for _, e := range tables[0].Entries {
		held += len(e.Value.Raw())
	}
	st := tables[0]
	if n := len(st.Entries); n == 0 || held > runtime.MaxListBytes || !st.Truncated || st.Next == nil || !strings.Contains(stderr, "truncated") {
		t.Fatalf("state scan of %d values of %d bytes: %d listed, %d bytes, truncated %v; stderr %q", events, size, n, held, st.Truncated, stderr)
	}
	// The rest, from where the first part stopped.
	code, stdout, stderr = runCLI2(t, "state", "scan", "--json", "--start", string(st.Next.Raw()), "--data", data, app, "sink", "all")
	tables = nil
	if err := json.Unmarshal([]byte(stdout), &tables); code != 0 || err != nil || len(tables) != 1 || len(st.Entries)+len(tables[0].Entries) != events || tables[0].Truncated {
		t.Fatalf("state scan --start %q: exit %d, %v, %d tables, %d+%d entries, truncated %v\n%s", st.Next.Raw(), code, err, len(tables), len(st.Entries), len(tables[0].Entries), tables[0].Truncated, stderr)
	}
}

// TestOfflineStateScanOddKeyResume: a truncated state scan whose next key
// does not print (a NUL, a tab) says how to go on, and going on so lists
// the rest, no key lost or repeated. The note printed the key quoted, to
// be given to --start, which took the quotes and escapes as the key's
// bytes (and no argument can hold a NUL): the rest was lost.
func TestOfflineStateScanOddKeyResume(t *testing.T) {
	const events, size = 12, runtime.MaxListBytes / 10
	app, data := bigEvents(t, events, size, "clitest_keep_odd")
	resume := regexp.MustCompile(`again with (--start(?:-base64)?) (\S+)\n`)
	seen := map[string]int{}
	args := []string{"state", "scan", "--json", "--data", data, app, "sink"} // every table: the note names it
	for run := 0; ; run++ {
		code, stdout, stderr := runCLI2(t, args...)
		var tables []runtime.StateTable
		if err := json.Unmarshal([]byte(stdout), &tables); code != 0 || err != nil || len(tables) != 1 {
			t.Fatalf("%q: exit %d, %v, %d tables\n%s", args, code, err, len(tables), stderr)
		}
		for _, e := range tables[0].Entries {
			seen[string(e.Key.Raw())]++
		}
		if !tables[0].Truncated {
			break
		}
		m := resume.FindStringSubmatch(stderr)
		if m == nil || run == events {
			t.Fatalf("%q: truncated at %q; the note gives no way to go on: %q", args, tables[0].Next.Raw(), stderr)
		}
		args = []string{"state", "scan", "--json", m[1], m[2], "--data", data, app, "sink", "all"}
	}
	for i := range events {
		if k := fmt.Sprintf("\x00\t%d", i); seen[k] != 1 {
			t.Errorf("key %q listed %d times, want once (%d keys seen)", k, seen[k], len(seen))
		}
	}
}

// TestStateScanPrefixBase64: a prefix that does not print is given in
// base64, as a resume key is (--prefix had no such form: a NUL cannot be
// an argument).
func TestStateScanPrefixBase64(t *testing.T) {
	app, data := bigEvents(t, 12, 1, "clitest_keep_odd")
	code, stdout, stderr := runCLI2(t, "state", "scan", "--json", "--prefix-base64", base64.StdEncoding.EncodeToString([]byte("\x00\t1")), "--data", data, app, "sink")
	var tables []runtime.StateTable
	if err := json.Unmarshal([]byte(stdout), &tables); code != 0 || err != nil || len(tables) != 1 {
		t.Fatalf("exit %d, %v\n%s", code, err, stderr)
	}
	var keys []string
	for _, e := range tables[0].Entries {
		keys = append(keys, string(e.Key.Raw()))
	}
	if want := []string{"\x00\t1", "\x00\t10", "\x00\t11"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
}

// TestQueueTailHugeCount: -n past any count lists every entry, as -n 0:
// above MaxInt/2 the tail's 2n wrapped negative and the CLI panicked.
func TestQueueTailHugeCount(t *testing.T) {
	app, data := bigEvents(t, 3, 1, "clitest_reject")
	code, stdout, stderr := runCLI2(t, "queue", "tail", "-n", "5000000000000000000", "--data", data, app, runtime.DLQName("sink"))
	if code != 0 || strings.Count(stdout, "\n") != 3 {
		t.Fatalf("queue tail -n 5e18: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// TestResumeFlag: the note's way on gives a key as --start only when a
// shell passes it unchanged as written; any other goes as base64. Keys a
// shell splits, globs or runs ("a;b", "x*", "a|b", "~u") were given as
// --start.
func TestResumeFlag(t *testing.T) {
	for key, want := range map[string]string{
		"7": "--start 7", "user:42/x-y_z.v,w=1+2@h%": "--start user:42/x-y_z.v,w=1+2@h%", "clé": "--start clé",
		"a;b": "--start-base64 YTti", "x*": "--start-base64 eCo=", "a|b": "--start-base64 YXxi", "~u": "--start-base64 fnU=",
		"a b": "--start-base64 YSBi", "\x00\t7": "--start-base64 AAk3", "$x": "--start-base64 JHg=", "-n": "--start -n",
	} {
		if got := resumeFlag([]byte(key)); got != want {
			t.Errorf("resumeFlag(%q) = %q, want %q", key, got, want)
		}
	}
}
