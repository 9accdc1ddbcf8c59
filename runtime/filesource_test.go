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
	deadline := time.Now().Add(time.Minute) // a hang detector
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
	// waitIdle waits until neither flowlet is in a step or about to start
	// one (Busy): both wait, the source polling Changed.
	waitIdle := func() {
		t.Helper()
		for {
			st := a.Status()
			if flowletStatus(st, "src").Busy == 0 && flowletStatus(st, "c").Busy == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the app did not settle: %+v", st.Flowlets)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	// sourceLooked waits for an empty step (the source found no whole
	// line) that started after a status with empty steps at empty0.
	sourceLooked := func(empty0 uint64) {
		t.Helper()
		for a.Status().Tx.EmptySteps <= empty0 {
			if time.Now().After(deadline) {
				t.Fatalf("the source did not look at the file again: %+v", a.Status())
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	waitTotal(2)
	waitIdle()
	started := a.TxStats().Started
	time.Sleep(200 * time.Millisecond) // 100 IdleWaits that must start nothing
	if n := a.TxStats().Started - started; n != 0 {
		t.Fatalf("%d transactions started while the followed file did not grow", n)
	}
	empty0 := a.Status().Tx.EmptySteps // the app is idle: nothing steps
	appendFile("c")                    // no "\n" yet: not a line
	sourceLooked(empty0)
	if f := flowletStatus(a.Status(), "src"); f.Processed != 2 {
		t.Fatalf("the source emitted %d events after a partial line, want 2", f.Processed)
	}
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
	waitIdle()
	empty0 = a.Status().Tx.EmptySteps
	appendFile("\x00\x00\x00\x00")
	sourceLooked(empty0) // it saw the preallocated bytes (no whole line)
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
