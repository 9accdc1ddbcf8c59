package weblog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/flowrun/flowrun/examples/weblog/flowlets"
)

// The end-to-end test: the weblog app (app.yaml: its parser is a plugin, in
// processes of its own) as a child process, killed with SIGKILL at random
// moments and restarted each time, its parser plugin processes killed with
// SIGKILL at random moments too, then drained; its exported results must
// equal the independent verifier's exactly, and its dead-letter queue must
// hold exactly the malformed lines.
//
//	go test ./examples/weblog -run E2E -v
//
// Environment (all optional):
//
//	WEBLOG_E2E_LINES   lines of the generated log (default 200000)
//	WEBLOG_E2E_KILLS   kills while the app runs (default 20)
//	WEBLOG_E2E_PLUGIN_KILLS kills of parser plugin processes, at least (default 20)
//	WEBLOG_E2E_SEED    seed of the log and of the kill times (default: random, logged)
//	WEBLOG_E2E_KILL_MS most milliseconds a run processes before its kill (default: adapts)
//	WEBLOG_E2E_KEEP    keep the work directory (logged) instead of removing it

// hugeLines is how many lines of the generated log are longer than the
// reader's max_line_bytes: the reader dead-letters them itself, its
// skipping of the rest of the line committed like its offset, so kills
// while it skips must not lose or repeat a line either.
const hugeLines = 2

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

func moduleRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// build builds a command of the module into dir.
func build(t testing.TB, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = moduleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

func TestE2EKillRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test (minutes)")
	}
	lines := envInt(t, "WEBLOG_E2E_LINES", 200000)
	kills := envInt(t, "WEBLOG_E2E_KILLS", 20)
	pluginKills := envInt(t, "WEBLOG_E2E_PLUGIN_KILLS", 20)
	seed := uint64(envInt(t, "WEBLOG_E2E_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("lines=%d kills=%d seed=%d (WEBLOG_E2E_LINES, WEBLOG_E2E_KILLS, WEBLOG_E2E_SEED)", lines, kills, seed)
	rng := rand.New(rand.NewPCG(seed, 0xe2e))

	dir := t.TempDir()
	if os.Getenv("WEBLOG_E2E_KEEP") != "" {
		var err error
		if dir, err = os.MkdirTemp("", "weblog-e2e-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("work directory %s", dir)
	}
	bin := filepath.Join(dir, "bin")
	flowrun := build(t, bin, "./examples/weblog/cmd/weblog") // the flowrun CLI with the weblog types
	gen := build(t, bin, "./examples/weblog/gen")
	verify := build(t, bin, "./examples/weblog/verify")
	export := build(t, bin, "./examples/weblog/export")

	logFile := filepath.Join(dir, "access.log")
	genLog := func() {
		run(t, gen, "-lines", strconv.Itoa(lines), "-seed", strconv.FormatUint(seed, 10),
			"-final-newline=false", "-huge", strconv.Itoa(hugeLines), "-out", logFile)
	}
	genLog()

	app := filepath.Join(moduleRoot(t), "examples", "weblog", "app.yaml")
	data := filepath.Join(dir, "data")
	hours := filepath.Join(dir, "hours.jsonl")
	stderr := filepath.Join(dir, "flowrun.stderr")
	wa := &weblogApp{flowrun: flowrun, app: app, data: data, input: logFile, hours: hours, stderr: stderr, mark: dir,
		pluginCache: filepath.Join(os.TempDir(), "flowrun-plugin-test-cache")}
	start := func() (*exec.Cmd, *os.File) { return wa.start(t) }
	defer checkNoLeftovers(t, wa.mark)
	// After a kill: the store may stay locked a moment (waitStoreFree).
	storeFree := func(run int) {
		t.Helper()
		if err := waitStoreFree(data, func(holders string) {
			t.Logf("run %d: the store is still locked after the killed app's wait, by %s; waiting", run, holders)
		}); err != nil {
			t.Fatal(err)
		}
	}
	tail := func() string {
		b, _ := os.ReadFile(stderr)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return string(b)
	}

	// Kill at random moments: every fourth run at a random time after it
	// was spawned (often while it opens and recovers its store), the others
	// at a random time up to killMS after it logged that it runs (while it
	// processes). A run that drains before its kill ends the kill phase
	// early (see below for what follows).
	//
	// killMax adapts to the machine unless WEBLOG_E2E_KILL_MS sets it: after
	// every run killed while processing, its progress (read from the killed
	// app's store) gives the processing rate; with the fastest rate seen so
	// far (a machine that gets less busy speeds the app up), killMax is
	// chosen so that the remaining kills let the app process under a third
	// of what is left, leaving the rest to the final run.
	//
	// A machine fast enough to drain the log before the kills are done (or
	// before a kill adapted to it) gets the whole phase again, from an empty
	// store, with a log twice as long, up to twice; then the test fails
	// asking for a longer log.
	adapt := os.Getenv("WEBLOG_E2E_KILL_MS") == ""
	began := time.Now()
	var killed, pluginKilled int
	killPhase := func() (killed, pluginKilled int) {
		drained := false
		killMax := time.Duration(envInt(t, "WEBLOG_E2E_KILL_MS", 300)) * time.Millisecond
		var lastDone int64
		var maxRate float64
		adaptAfter := func(i int, ranFor time.Duration) {
			if !adapt || ranFor <= 0 {
				return
			}
			done := progress(t, export, app, data)
			// Lines done since the last measurement, over this run's running
			// time: an overestimate when startup-killed runs also progressed,
			// which only makes the next kills earlier.
			maxRate = max(maxRate, float64(done-lastDone)/ranFor.Seconds())
			lastDone = done
			left := kills - i - 1
			if maxRate > 0 && left > 0 && int64(lines) > done {
				// Post-running kills average killMax/2 each; a quarter of the
				// kills happen at start-up.
				want := 0.25 * float64(int64(lines)-done) / maxRate / (0.75 * float64(left) / 2)
				killMax = min(max(time.Duration(want*float64(time.Second)), 20*time.Millisecond), 3*time.Second)
			}
			if i == kills/4 {
				t.Logf("after %d kills: %d of %d lines done, up to %.0f lines/s while running; kill delays now up to %v", i+1, done, lines, maxRate, killMax.Round(time.Millisecond))
			}
		}
		for i := 0; i < kills && !drained; i++ {
			from, _ := os.Stat(stderr)
			cmd, f := start()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			// Every fourth run: at a random moment of its first 400 ms, but no
			// later than a regular kill would be.
			startup := 10 * time.Second
			if i%4 == 0 {
				startup = time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
			}
			d := time.Duration(rng.Int64N(int64(killMax)) + 1)
			timer, ranFor := killTimer(stderr, from, startup, d)
			// Runs killed while they process also lose both parser plugin
			// processes, each at a random moment of the first half of the run
			// (so the app mostly restarts them and goes on before its kill).
			var pk *pluginKiller
			if i%4 != 0 {
				pk = killPlugins(cmd.Process.Pid, stderr, from, []time.Duration{
					time.Duration(rng.Int64N(int64(d/2)) + 1), time.Duration(rng.Int64N(int64(d/4)) + 1)})
			}
			select {
			case err := <-done:
				pluginKilled += pk.stop()
				f.Close()
				if err != nil {
					t.Fatalf("run %d exited on its own: %v\n%s", i, err, tail())
				}
				drained = true
				t.Logf("run %d drained before its kill", i)
			case <-timer:
				pluginKilled += pk.stop()
				_ = cmd.Process.Signal(syscall.SIGKILL)
				err := <-done
				f.Close()
				storeFree(i)
				r := ranFor()
				var ee *exec.ExitError
				switch {
				case errors.As(err, &ee) && !ee.Exited():
					killed++
					adaptAfter(i, r)
				case err == nil:
					drained = true
					t.Logf("run %d drained just before its kill", i)
				default:
					t.Fatalf("run %d: %v\n%s", i, err, tail())
				}
			}
		}
		return killed, pluginKilled
	}
	for attempt := 0; ; attempt++ {
		killed, pluginKilled = killPhase()
		if killed >= kills || attempt == 2 {
			break
		}
		lines *= 2
		t.Logf("the app drained after %d of %d kills: the kill phase again, from an empty store, with %d lines", killed, kills, lines)
		for _, p := range []string{data, hours} {
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
		}
		genLog()
	}
	t.Logf("killed %d times in %v; %d plugin processes killed", killed, time.Since(began).Round(time.Millisecond), pluginKilled)
	if killed < kills {
		t.Errorf("killed only %d of %d times: the app drained first (raise WEBLOG_E2E_LINES or lower WEBLOG_E2E_KILL_MS)", killed, kills)
	}

	// How far the killed runs got (a store left by kill -9 opens like any
	// other): evidence that the kills interrupted real work.
	t.Logf("after the kills: %d of %d lines done", progress(t, export, app, data), lines)

	// Let it drain; parser plugin processes are killed at random moments
	// until there were pluginKills in all.
	drainStart := time.Now()
	from, _ := os.Stat(stderr)
	cmd, f := start()
	var delays []time.Duration
	for range max(pluginKills-pluginKilled, 0) {
		delays = append(delays, time.Duration(20+rng.Int64N(60))*time.Millisecond)
	}
	pk := killPlugins(cmd.Process.Pid, stderr, from, delays)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		pluginKilled += pk.stop()
		f.Close()
		if err != nil {
			t.Fatalf("final run: %v\n%s", err, tail())
		}
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		t.Fatalf("final run did not drain in 5 minutes\n%s", tail())
	}
	t.Logf("final run drained in %v; total %v", time.Since(drainStart).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if b, err := os.ReadFile(stderr); err == nil {
		t.Logf("%d plugin processes killed; the app logged %d plugin restarts", pluginKilled, bytes.Count(b, []byte(`msg="restarting plugin"`)))
	}
	if pluginKilled < pluginKills {
		t.Errorf("killed only %d of %d plugin processes: the app drained first (raise WEBLOG_E2E_LINES)", pluginKilled, pluginKills)
	}

	resFile, dlqFile := filepath.Join(dir, "results.json"), filepath.Join(dir, "dlq.log")
	run(t, export, "-app", app, "-data", data, "-out", resFile, "-dlq", dlqFile)
	out, err := exec.Command(verify, "-log", logFile, "-results", resFile, "-limit", "40").CombinedOutput()
	if err != nil {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	t.Logf("verify: %s", bytes.TrimSpace(out))

	// The dead-letter queue holds exactly the malformed lines: as many as
	// the verifier counts (checked above through "malformed"), each a line
	// of the log (as a multiset), and each malformed by the verifier's rules.
	var res flowlets.Results
	if b, err := os.ReadFile(resFile); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	// Not vacuous: the results account for every line of the log, and
	// there were malformed lines to dead-letter.
	var wellFormed int64
	for _, n := range res.StatusCounts {
		wellFormed += n
	}
	if wellFormed+res.Malformed != int64(lines) || res.Malformed <= hugeLines {
		t.Errorf("results account for %d well-formed and %d malformed lines; want %d lines, some malformed", wellFormed, res.Malformed, lines)
	}
	parserDead := res.Malformed - hugeLines // the reader dead-letters those
	checkDeadLetters(t, logFile, dlqFile, parserDead)
	var dlqRes flowlets.Results
	if b, err := exec.Command(verify, "-log", dlqFile, "-print").Output(); err != nil {
		t.Fatalf("verify -print of the dead letters: %v", err)
	} else if err := json.Unmarshal(b, &dlqRes); err != nil {
		t.Fatal(err)
	}
	if dlqRes.Malformed != parserDead || len(dlqRes.PageViews) != 0 {
		t.Errorf("dead letters: verifier finds %d malformed and %d paths among them, want %d and 0",
			dlqRes.Malformed, len(dlqRes.PageViews), parserDead)
	}

	if checkHours(t, hours, &res, false) == 0 {
		t.Error("no hour was flushed while the app was killed and drained: the hours file went unchecked")
	}

	// Hours closed but not yet flushed when the app drained (no tick came
	// in between) are flushed by the next run, the grace being 0: then
	// every hour but the latest has its final count as its last line.
	cmd, f = start()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run after the drain: %v\n%s", err, tail())
	}
	f.Close()
	checkHours(t, hours, &res, true)
}

// pluginKiller kills the parser plugin processes of one run of the app.
type pluginKiller struct {
	quit   chan struct{}
	done   chan struct{}
	killed int
}

// killPlugins kills, for each of delays in turn, a random parser plugin
// process (a child of the app named weblogparser) that long after the
// previous kill, the first delay counted from when the app logs that it
// runs (in file after from). A nil *pluginKiller is a no-op.
func killPlugins(app int, file string, from os.FileInfo, delays []time.Duration) *pluginKiller {
	pk := &pluginKiller{quit: make(chan struct{}), done: make(chan struct{})}
	var off int64
	if from != nil {
		off = from.Size()
	}
	go func() {
		defer close(pk.done)
		buf := make([]byte, 64<<10)
		for running := false; !running; {
			if f, err := os.Open(file); err == nil {
				n, _ := f.ReadAt(buf, off)
				f.Close()
				running = bytes.Contains(buf[:n], []byte("msg=running"))
			}
			select {
			case <-pk.quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		for k, d := range delays {
			select {
			case <-pk.quit:
				return
			case <-time.After(d):
			}
			pids := pluginPIDs(app)
			if len(pids) == 0 {
				continue
			}
			if syscall.Kill(pids[k%len(pids)], syscall.SIGKILL) == nil {
				pk.killed++
			}
		}
	}()
	return pk
}

// stop ends the killing and returns how many processes were killed.
func (pk *pluginKiller) stop() int {
	if pk == nil {
		return 0
	}
	close(pk.quit)
	<-pk.done
	return pk.killed
}

// pluginPIDs returns the live parser plugin processes of the app: its
// children named weblogparser (from /proc).
func pluginPIDs(app int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, f, ok := procStat(pid)
		if !ok || comm != "weblogparser" || f[0] == "Z" {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == app {
			out = append(out, pid)
		}
	}
	return out
}

// progress returns the lines an app's store has accounted for so far:
// well-formed lines counted by status plus dead letters.
func progress(t *testing.T, export, app, data string) int64 {
	t.Helper()
	out, err := exec.Command(export, "-app", app, "-data", data).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("export: %v\n%s", err, stderr)
	}
	var r flowlets.Results
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	n := r.Malformed
	for _, c := range r.StatusCounts {
		n += c
	}
	return n
}

// killTimer fires startup after now, or d after the app logs that it runs
// (in file after the first from.Size() bytes), whichever comes first. ranFor
// says, once it fired, how long the app had been running by then.
func killTimer(file string, from os.FileInfo, startup, d time.Duration) (fire <-chan time.Time, ranFor func() time.Duration) {
	var off int64
	if from != nil {
		off = from.Size()
	}
	spawned := time.Now()
	ch := make(chan time.Time, 1)
	var running time.Duration // since spawned; written before ch is sent to
	go func() {
		buf := make([]byte, 64<<10)
		for time.Since(spawned) < startup {
			f, err := os.Open(file)
			if err == nil {
				n, _ := f.ReadAt(buf, off)
				f.Close()
				if bytes.Contains(buf[:n], []byte("msg=running")) {
					running = time.Since(spawned)
					time.Sleep(min(d, startup-running))
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
		ch <- time.Now()
	}()
	var fired time.Time
	return ch, func() time.Duration {
		if fired.IsZero() {
			fired = time.Now()
		}
		if running == 0 {
			return 0
		}
		return fired.Sub(spawned) - running
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if b, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, b)
	}
}

// splitLines splits data by the README's line rules (§1).
func splitLines(data []byte) []string {
	var out []string
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			out = append(out, string(data))
			break
		}
		out = append(out, string(data[:i]))
		data = data[i+1:]
	}
	return out
}

// checkDeadLetters checks the parsers' dead letters (the -dlq file): as
// many as want, each a line of the log.
func checkDeadLetters(t *testing.T, logFile, dlqFile string, want int64) {
	t.Helper()
	logData, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	dlqData, err := os.ReadFile(dlqFile)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]int{}
	for _, l := range splitLines(logData) {
		have[l]++
	}
	dead := splitLines(dlqData)
	if int64(len(dead)) != want {
		t.Errorf("%d dead letters listed, want %d", len(dead), want)
	}
	bad := 0
	for _, l := range dead {
		if have[l] == 0 {
			if bad++; bad <= 5 {
				t.Errorf("dead letter %.100q is not a line of the log (or is there more often than in the log)", l)
			}
			continue
		}
		have[l]--
	}
}

// checkHours checks the file sink's flushed hours (hoursProblems) and
// returns how many hours were flushed.
func checkHours(t *testing.T, file string, final *flowlets.Results, all bool) int {
	t.Helper()
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		t.Logf("no hours file: no hour was closed")
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	problems, flushed, exact := hoursProblems(data, final, all)
	t.Logf("hours file: %d of %d hours flushed, %d with their final counts", flushed, len(final.BytesPerHour), exact)
	for _, p := range problems {
		t.Error("hours file: " + p)
	}
	return flushed
}

// hoursProblems checks the lines of an hours file: JSON objects of hours
// that exist, never more bytes or lines than the final counts, each flush
// of an hour with more lines than the one before (app.yaml has one
// bytes_per_hour instance). (The last flush of an hour can be older than
// the final counts when a late line reopened it and the app drained before
// the next tick.) With all, every hour but the latest must have been
// flushed, its last line with the final counts. It returns what is wrong,
// how many hours were flushed and how many of them have their final counts.
func hoursProblems(data []byte, final *flowlets.Results, all bool) (problems []string, flushed, exact int) {
	type totals struct{ bytes, lines int64 }
	last := map[string]totals{}
	for _, l := range splitLines(data) {
		var h struct {
			Hour  string `json:"hour"`
			Bytes int64  `json:"bytes"`
			Lines int64  `json:"lines"`
		}
		if err := json.Unmarshal([]byte(l), &h); err != nil {
			problems = append(problems, fmt.Sprintf("%q: %v", l, err))
			continue
		}
		want, ok := final.BytesPerHour[h.Hour]
		wantLines := final.LinesPerHour[h.Hour]
		if !ok || h.Bytes > want || h.Lines <= 0 || h.Lines > wantLines {
			problems = append(problems, fmt.Sprintf("%s: %d bytes in %d lines; final %d in %d (exists %v)", h.Hour, h.Bytes, h.Lines, want, wantLines, ok))
		}
		// One bytes_per_hour instance flushes an hour again only once a
		// line reopened it: more lines, no fewer bytes. The same totals
		// twice are one flush written twice.
		if prev, seen := last[h.Hour]; seen && (h.Lines <= prev.lines || h.Bytes < prev.bytes) {
			problems = append(problems, fmt.Sprintf("%s: %d bytes in %d lines after %d in %d: not a later flush", h.Hour, h.Bytes, h.Lines, prev.bytes, prev.lines))
		}
		last[h.Hour] = totals{h.Bytes, h.Lines}
	}
	for h, n := range last {
		if final.BytesPerHour[h] == n.bytes && final.LinesPerHour[h] == n.lines {
			exact++
		}
	}
	hours := len(final.BytesPerHour)
	if all && (exact != hours-1 || len(last) != hours-1) {
		problems = append(problems, fmt.Sprintf("%d of %d hours flushed, %d of them with the final counts; want all but the latest hour, final", len(last), hours, exact))
	}
	return problems, len(last), exact
}

// TestHoursCheck: the hours-file check catches an hour written twice (a
// flush the file sink repeated, or a tick that flushed an hour twice) and
// an hour that went backwards, while a reopened hour flushed again is fine.
func TestHoursCheck(t *testing.T) {
	final := &flowlets.Results{
		BytesPerHour: map[string]int64{"2026-11-21T13": 30, "2026-11-21T14": 0, "2026-11-21T15": 5},
		LinesPerHour: map[string]int64{"2026-11-21T13": 3, "2026-11-21T14": 2, "2026-11-21T15": 1},
	}
	const h13a, h13, h14 = `{"hour":"2026-11-21T13","bytes":20,"lines":2}`, `{"hour":"2026-11-21T13","bytes":30,"lines":3}`, `{"hour":"2026-11-21T14","bytes":0,"lines":2}`
	for _, c := range []struct {
		name, file string
		ok         bool
	}{
		{"final", h13 + "\n" + h14 + "\n", true},
		{"reopened and flushed again", h13a + "\n" + h14 + "\n" + h13 + "\n", true},
		{"hour written twice", h13 + "\n" + h14 + "\n" + h14 + "\n", false},
		{"hour written twice, reopened after", h13a + "\n" + h13a + "\n" + h14 + "\n" + h13 + "\n", false},
		{"hour went backwards", h13 + "\n" + h14 + "\n" + h13a + "\n", false},
		{"hour missing", h13 + "\n", false},
		{"more lines than final", `{"hour":"2026-11-21T14","bytes":0,"lines":3}` + "\n" + h13 + "\n", false},
	} {
		problems, _, _ := hoursProblems([]byte(c.file), final, true)
		if ok := len(problems) == 0; ok != c.ok {
			t.Errorf("%s: problems %q, want none: %v", c.name, problems, c.ok)
		}
	}
}
