package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testLog = `203.0.113.7 - - [21/Nov/2026:13:55:36 +0000] "GET /a?x=1 HTTP/1.1" 200 100 "-" "-"
203.0.113.7 - - [21/Nov/2026:13:55:37 +0000] "GET /a/ HTTP/1.1" 304 - "-" "-"
2001:db8::1 - - [21/Nov/2026:14:00:00 +0000] "GET http://h/b HTTP/1.1" 404 7 "-" "-"
garbage
`

const testResults = `{"page_views":{"/a":2,"/b":1},"visitors":{"203.0.113.7":2,"2001:db8::1":1},` +
	`"status_counts":{"200":1,"304":1,"404":1},"bytes_per_hour":{"2026-11-21T13":100,"2026-11-21T14":7},` +
	`"lines_per_hour":{"2026-11-21T13":2,"2026-11-21T14":1},"malformed":1}`

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runVerify(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVerifyCommand(t *testing.T) {
	dir := t.TempDir()
	logPath := write(t, dir, "access.log", testLog)

	code, out, errs := runVerify("-log", logPath, "-results", write(t, dir, "ok.json", testResults))
	if code != 0 || !strings.HasPrefix(out, "PASS") {
		t.Fatalf("pass: exit %d\n%s%s", code, out, errs)
	}

	wrong := strings.Replace(testResults, `"/b":1`, `"/b":2,"/c":1`, 1)
	wrong = strings.Replace(wrong, `"malformed":1`, `"malformed":0`, 1)
	code, out, _ = runVerify("-log", logPath, "-results", write(t, dir, "bad.json", wrong), "-limit", "1")
	if code != 1 || !strings.HasPrefix(out, "FAIL: 3 difference(s)") || !strings.Contains(out, "2 more difference(s) not shown") {
		t.Fatalf("fail: exit %d\n%s", code, out)
	}

	// -print output is itself a passing results file.
	code, out, _ = runVerify("-log", logPath, "-print")
	if code != 0 {
		t.Fatalf("print: exit %d", code)
	}
	code, _, errs = runVerify("-log", logPath, "-results", write(t, dir, "printed.json", out), "-reasons")
	if code != 0 || !strings.Contains(errs, "fields:") {
		t.Fatalf("printed results do not pass: exit %d\n%s\n%s", code, out, errs)
	}

	for _, args := range [][]string{
		{},
		{"-log", logPath},
		{"-log", logPath, "-print", "-results", filepath.Join(dir, "ok.json")},
		{"-results", filepath.Join(dir, "ok.json")},
		{"-log", filepath.Join(dir, "missing.log"), "-print"},
		{"-log", logPath, "-results", filepath.Join(dir, "missing.json")},
		{"-log", logPath, "-results", write(t, dir, "notjson.json", "PASS")},
		{"-log", logPath, "-results", write(t, dir, "dup.json", strings.Replace(testResults, `"/b":1`, `"/b":1,"/b":1`, 1))},
		{"-log", logPath, "-print", "extra"},
		{"-bogus"},
	} {
		if code, out, errs := runVerify(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s%s", args, code, out, errs)
		}
	}
}
