package runtime_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// A followed file: appended lines arrive, a partial last line waits for its
// "\n" (also when it is completed in place, without the file growing), and
// while a file ending in "\n" does not grow the source runs no step at all
// (the runtime asks the source's Changed, a stat, every IdleWait instead of
// starting a transaction).
func TestFileSourceFollow(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(input, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := runApp(t, plan(t, dir, `
app: t
flowlets:
  src: {type: file_source, config: {path: `+input+`, follow: true}}
  c: {type: t_count}
connections:
  - {from: src, to: c}
`), runtime.Options{NoSync: true, DataDir: filepath.Join(dir, "data"), IdleWait: 2 * time.Millisecond})
	deadline := time.Now().Add(10 * time.Second)
	waitTotal := func(want int64) {
		t.Helper()
		for counter(t, a, "c", "n", "total") != want {
			if time.Now().After(deadline) {
				t.Fatalf("total %d, want %d", counter(t, a, "c", "n", "total"), want)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	appendFile := func(s string) {
		t.Helper()
		f, err := os.OpenFile(input, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	waitTotal(2)
	time.Sleep(50 * time.Millisecond) // the last steps settle: the source is idle
	started := a.TxStats().Started
	time.Sleep(200 * time.Millisecond) // 100 IdleWaits
	if n := a.TxStats().Started - started; n != 0 {
		t.Fatalf("%d transactions started while the followed file did not grow", n)
	}
	appendFile("c") // no "\n" yet: not a line
	time.Sleep(50 * time.Millisecond)
	if n := counter(t, a, "c", "n", "total"); n != 2 {
		t.Fatalf("total %d after a partial line, want 2", n)
	}
	appendFile("\nd\n")
	waitTotal(4)
	if n := counter(t, a, "c", "seen", "c"); n != 1 {
		t.Fatalf(`line "c" counted %d times, want 1`, n)
	}
	// A writer that preallocates and fills in place: the file does not
	// grow when the line is completed, and the line still arrives.
	appendFile("\x00\x00\x00\x00")
	time.Sleep(20 * time.Millisecond)
	f, err := os.OpenFile(input, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if _, err := f.WriteAt([]byte("e\n"), fi.Size()-4); err != nil {
		t.Fatal(err)
	}
	f.Close()
	waitTotal(5)
}
