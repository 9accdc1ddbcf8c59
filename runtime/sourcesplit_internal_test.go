package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime/builtin"
	"github.com/flowrun/flowrun/tx"
)

// TestSourceStepSplit: a file_source's, stdin_source's or generator's step
// whose commit fails for its size (too large for one atomic write) or its
// time (past step_timeout) is redone with half its records, down to the
// one record that fails alone; every other record before it commits
// exactly once. A too-large one goes to the source's dead-letter queue
// and the source goes on to its end, and so does stdin's too-slow one
// after its retries; file_source's and generator's stop the source
// (TestSourceSlowRecordStopsSource). Each source stopped after its
// retries: the step was never smaller.
func TestSourceStepSplit(t *testing.T) {
	for _, typ := range []string{"file_source", "stdin_source", "generator"} {
		for _, fault := range []error{tx.ErrTooLarge, tx.ErrNotInProgress} {
			name := map[error]string{tx.ErrTooLarge: "too_large", tx.ErrNotInProgress: "slow"}[fault]
			t.Run(typ+"/"+name, func(t *testing.T) {
				alone := 0 // steps of the bad record alone
				a, err := runSplitSource(t, typ, func(sc *stepCtx, evs []string) error {
					switch {
					case len(evs) > splitRecords/4: // too large as a whole, fine in halves
						return fmt.Errorf("%w (test: %d events)", tx.ErrTooLarge, len(evs))
					case slices.Equal(evs, []string{splitBad}):
						alone++
						return fmt.Errorf("%w (test)", fault)
					case slices.Contains(evs, splitBad):
						return fmt.Errorf("%w (test: with %s)", tx.ErrTooLarge, splitBad)
					}
					return nil
				})
				if wantAlone := map[error]int{tx.ErrTooLarge: 1, tx.ErrNotInProgress: 2}[fault]; alone != wantAlone {
					t.Errorf("steps of %s alone: %d, want %d", splitBad, alone, wantAlone)
				}
				dead := srcDeadLetters(t, a)
				if fault == tx.ErrNotInProgress && typ != "stdin_source" {
					var rfa *builtin.RecordFailsAloneError
					if !errors.As(err, &rfa) || !rfa.Slow {
						t.Fatalf("run: %v, want a RecordFailsAloneError of a step too slow", err)
					}
					checkSplitSink(t, a, 7)
					if len(dead) != 0 {
						t.Errorf("dead letters of src: %+v, want none", dead)
					}
					return
				}
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				checkSplitSink(t, a, splitRecords)
				if len(dead) != 1 || string(dead[0].Payload) != splitBad || !strings.Contains(dead[0].Error, "fails alone") {
					t.Errorf("dead letters of src: %+v, want %s's, saying its step fails alone", dead, splitBad)
				} else if fault == tx.ErrTooLarge && !strings.Contains(dead[0].Error, "too large") {
					t.Errorf("%s's dead letter does not say it was too large: %s", splitBad, dead[0].Error)
				} else if where := splitBadRecord[typ]; !strings.HasPrefix(dead[0].Error, where) {
					t.Errorf("%s's dead letter does not say where it is (%s…): %s", splitBad, where, dead[0].Error)
				}
			})
		}
	}
}

// splitBadRecord is how each source names splitBad (r7: at offset 21 of
// the file, r0 … r6 and their "\n" before it; stdin's 8th line).
var splitBadRecord = map[string]string{"file_source": "line at offset 21 of ", "stdin_source": "line 8 of standard input", "generator": "event 7"}

// srcDeadLetters is the dead-letter queue of a's flowlet src.
func srcDeadLetters(t *testing.T, a *App) []DeadLetter {
	t.Helper()
	var dead []DeadLetter
	if err := a.Inspect().DeadLetters("src", 0, func(d DeadLetter) bool { dead = append(dead, d); return true }); err != nil {
		t.Fatal(err)
	}
	return dead
}

// TestSourceDroppedRecordFailsAgain: a record whose step fails alone and
// whose dead-letter step fails as well stops the source with a
// RecordFailsAloneError naming it; the records before it committed.
func TestSourceDroppedRecordFailsAgain(t *testing.T) {
	for _, typ := range []string{"file_source", "stdin_source", "generator"} {
		t.Run(typ, func(t *testing.T) {
			a, err := runSplitSource(t, typ, func(sc *stepCtx, evs []string) error {
				if slices.Contains(evs, splitBad) || len(sc.dead) > 0 {
					return fmt.Errorf("%w (test)", tx.ErrTooLarge)
				}
				return nil
			})
			var rfa *builtin.RecordFailsAloneError
			if !errors.As(err, &rfa) || !flowlet.IsPermanent(err) {
				t.Fatalf("run: %v, want a permanent RecordFailsAloneError", err)
			}
			if want := splitBadRecord[typ]; !strings.HasPrefix(rfa.Record, want) {
				t.Errorf("the error names %q, want %q…", rfa.Record, want)
			}
			checkSplitSink(t, a, 7)
		})
	}
}

// TestSourceSlowRecordStopsSource: a file_source's or generator's step of
// one record that still runs past step_timeout is slow by the machine's
// load (or too low a step_timeout), not by its record: after its retries
// the source stops with a RecordFailsAloneError naming it, nothing of it
// committed (a restart reads it again), instead of moving it to the
// source's dead-letter queue, which cannot be replayed. With every step of
// records too slow, every record went there and the app drained as if all
// was well. (stdin_source dead-letters it: stopping would lose it and the
// rest of standard input.)
func TestSourceSlowRecordStopsSource(t *testing.T) {
	for _, typ := range []string{"file_source", "generator"} {
		t.Run(typ, func(t *testing.T) {
			a, err := runSplitSource(t, typ, func(sc *stepCtx, evs []string) error {
				if len(evs) == 0 {
					return nil // a dead-letter record's step (none, once fixed)
				}
				return fmt.Errorf("%w (test: every step too slow)", tx.ErrNotInProgress)
			})
			var rfa *builtin.RecordFailsAloneError
			if !errors.As(err, &rfa) || !rfa.Slow || !errors.Is(err, tx.ErrNotInProgress) {
				t.Errorf("run: %v, want a RecordFailsAloneError of a step too slow", err)
			} else if want := map[string]string{"file_source": "line at offset 0 of ", "generator": "event 0"}[typ]; !strings.HasPrefix(rfa.Record, want) || !strings.Contains(err.Error(), "step_timeout") {
				t.Errorf("the error %q names %q, want %q… and step_timeout", err, rfa.Record, want)
			}
			if dead := srcDeadLetters(t, a); len(dead) != 0 {
				t.Errorf("%d records dead-lettered for being slow", len(dead))
			}
			checkSplitSink(t, a, 0)
		})
	}
}

const (
	splitRecords = 20
	splitBad     = "r7"
)

// runSplitSource runs (drains) src, a typ source of the records r0 … r19,
// into sink (t_count), src's commits failing with what fault returns for
// the step; it returns the app (open) and Run's error.
func runSplitSource(t *testing.T, typ string, fault func(sc *stepCtx, evs []string) error) (*App, error) {
	t.Helper()
	dir := t.TempDir()
	records := make([]string, splitRecords)
	for i := range records {
		records[i] = fmt.Sprintf("r%d", i)
	}
	input := strings.Join(records, "\n") + "\n"
	var config string
	switch typ {
	case "file_source":
		path := filepath.Join(dir, "in.txt")
		if err := os.WriteFile(path, []byte(input), 0o644); err != nil {
			t.Fatal(err)
		}
		config = fmt.Sprintf("{path: %q}", path)
	case "stdin_source":
		pipeStdin(t, input)
		config = "{}"
	case "generator":
		config = fmt.Sprintf("{count: %d, payload: 'r{seq}', batch: %d}", splitRecords, splitRecords)
	}
	a := openYAML(t, fmt.Sprintf(`
app: split
flowlets:
  src: {type: %s, retries: {max: 1, backoff: 1ms}, config: %s}
  sink: {type: t_count}
connections:
  - {from: src, to: sink}
`, typ, config), Options{NoSync: true, Drain: true})
	onSrcCommit(a, fault)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := a.Run(ctx)
	if ctx.Err() != nil {
		t.Fatal("the app did not drain")
	}
	return a, err
}

// checkSplitSink checks that sink (t_count) counted every record of the
// first upTo but splitBad once, and splitBad not at all.
func checkSplitSink(t *testing.T, a *App, upTo int) {
	t.Helper()
	if err := a.View("sink", func(r StateReader) error {
		for i := range upTo {
			p := fmt.Sprintf("r%d", i)
			n, err := r.Counters("seen").Get([]byte(p))
			if err != nil {
				return err
			}
			if want := int64(1); p == splitBad && n != 0 || p != splitBad && n != want {
				t.Errorf("record %s counted %d times", p, n)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// pipeStdin makes os.Stdin, for the test, a pipe that holds input and
// then ends (the stdin_source of an app opened meanwhile reads it).
func pipeStdin(t *testing.T, input string) {
	t.Helper()
	w := openStdinPipe(t)
	go func() {
		w.WriteString(input)
		w.Close()
	}()
}

// openStdinPipe makes os.Stdin, for the test, a pipe; it returns the
// pipe's writer, which the test closes.
func openStdinPipe(t *testing.T) *os.File {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = r
	t.Cleanup(func() { os.Stdin = old; r.Close() })
	return w
}

// SplitFaultEnv, set in a crash test child's environment, gives the
// source "src" of its app splitCrashFault (TestCrashSourceSplit).
const SplitFaultEnv = "FLOWRUN_TEST_SPLIT_FAULT"

func init() {
	if os.Getenv(SplitFaultEnv) == "" {
		return
	}
	afterInit = func(in *instance) error {
		if in.fl.Name == "src" {
			onSrcCommit(in.a, splitCrashFault)
		}
		return nil
	}
}

// splitCrashFault fails as too large a step of more than 600 lines (they
// come 1000 a step: split in two) and any step holding a line that
// SplitCrashDropped names, also alone: that line is dead-lettered.
func splitCrashFault(sc *stepCtx, evs []string) error {
	if len(evs) > 600 {
		return fmt.Errorf("%w (test: %d lines)", tx.ErrTooLarge, len(evs))
	}
	for _, e := range evs {
		if SplitCrashDropped(e) {
			return fmt.Errorf("%w (test: holds %s)", tx.ErrTooLarge, e)
		}
	}
	return nil
}

// SplitCrashDropped: line-N with N%1000 == 777 fails in any step.
func SplitCrashDropped(line string) bool {
	n, ok := strings.CutPrefix(line, "line-")
	return ok && strings.HasSuffix(n, "777")
}
