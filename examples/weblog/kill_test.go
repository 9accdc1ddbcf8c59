package weblog_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// weblogApp is how the tests run the weblog app (app.yaml) as a child
// process: its CLI binary, files and directories.
type weblogApp struct {
	flowrun, app, data, pluginCache, input, hours, stderr string
	// mark is put in the app's environment, which its plugin processes
	// inherit: the test's processes are found by it (leftovers).
	mark string
}

// markEnv names the environment variable that carries weblogApp.mark.
const markEnv = "WEBLOG_TEST_RUN"

// start starts the app, its output appended to a.stderr (f: close it after
// the wait).
func (a *weblogApp) start(t *testing.T) (cmd *exec.Cmd, f *os.File) {
	t.Helper()
	f, err := os.OpenFile(a.stderr, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// A small back-pressure bound keeps the reader close to the parsers,
	// so the lines done (what the e2e's kill timing adapts to) are most of
	// the lines read.
	cmd = exec.Command(a.flowrun, "run", "--drain", "--max-backlog", "8192", "--data", a.data, "--plugin-cache", a.pluginCache, a.app)
	// Closed hours flush at every tick, 50 ms apart, so that kills land
	// among the file sink's writes too.
	cmd.Env = append(os.Environ(), "WEBLOG_INPUT="+a.input, "WEBLOG_HOURS="+a.hours,
		"WEBLOG_TICK=50ms", "WEBLOG_GRACE=0s", markEnv+"="+a.mark)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, f
}

// storeFreeGuard bounds waitStoreFree: a lock held that long is a process
// that keeps the store, not a dying app's child.
const storeFreeGuard = time.Minute

// waitStoreFree waits until no process holds the store's lock (Badger's
// flock on the data directory), for use after a killed app was waited for.
// The wait does not mean the lock is free: a child the app was starting (a
// plugin process, between fork and exec) outlives a SIGKILL and holds a
// copy of every descriptor of the app, the locked directory's included,
// until its exec closes them; that exec first tears down the dead app's
// memory, which the child shares (Go forks with CLONE_VM|CLONE_VFORK), so
// under load the lock stays held for tens of milliseconds after the wait.
// held, if not nil, is called with the holders when the lock was held.
func waitStoreFree(data string, held func(holders string)) error {
	f, err := os.Open(data)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	fd := int(f.Fd())
	err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if err != nil && !errors.Is(err, syscall.EWOULDBLOCK) {
		f.Close()
		return fmt.Errorf("lock %s: %w", data, err)
	}
	if err != nil {
		if held != nil {
			held(lockHolders(data))
		}
		locked := make(chan error, 1)
		go func() { locked <- syscall.Flock(fd, syscall.LOCK_EX) }()
		select {
		case err = <-locked:
		case <-time.After(storeFreeGuard):
			// f stays open: the blocked Flock uses it.
			return fmt.Errorf("the store %s is still locked after %v, by %s", data, storeFreeGuard, lockHolders(data))
		}
		if err != nil {
			f.Close()
			return fmt.Errorf("lock %s: %w", data, err)
		}
	}
	return f.Close() // releases the lock
}

// lockHolders describes the processes (other than this one) with data
// open: pid, name, parent, state and executable.
func lockHolders(data string) string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + e.Name() + "/fd")
		for _, fd := range fds {
			if l, _ := os.Readlink("/proc/" + e.Name() + "/fd/" + fd.Name()); l == data {
				out = append(out, describeProc(pid))
				break
			}
		}
	}
	if len(out) == 0 {
		return "no process (released meanwhile)"
	}
	return strings.Join(out, "; ")
}

// procStat returns a process's name and the fields of /proc/pid/stat after
// it (state, ppid, ...).
func procStat(pid int) (comm string, fields []string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", nil, false
	}
	// pid (comm) state ppid ...
	i, j := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if i < 0 || j < i {
		return "", nil, false
	}
	f := strings.Fields(string(b[j+1:]))
	return string(b[i+1 : j]), f, len(f) >= 2
}

func describeProc(pid int) string {
	comm, f, ok := procStat(pid)
	if !ok {
		return fmt.Sprintf("pid %d (gone)", pid)
	}
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return fmt.Sprintf("pid %d (%s, state %s, ppid %s, exe %s)", pid, comm, f[0], f[1], exe)
}

// markedProcs returns the live processes whose environment holds
// markEnv=mark: the apps a test started, their plugin processes and any
// child of theirs.
func markedProcs(mark string) []int {
	want := []byte(markEnv + "=" + mark + "\x00")
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		if _, f, ok := procStat(pid); ok && f[0] != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// leftoverGuard bounds how long checkNoLeftovers waits for processes to
// exit; plugin processes of a killed app check for their host four times
// a second.
const leftoverGuard = 30 * time.Second

// checkNoLeftovers fails the test if processes it started (markedProcs)
// still run leftoverGuard after it, and kills them, so that none is left
// running after the test: orphaned plugin processes of a SIGKILLed app
// must exit on their own.
func checkNoLeftovers(t *testing.T, mark string) {
	t.Helper()
	if left := leftovers(mark, leftoverGuard); len(left) > 0 {
		t.Errorf("processes of the test still running %v after it (killed now): %s", leftoverGuard, strings.Join(left, "; "))
	}
}

// leftovers waits up to guard for the processes marked with mark to exit,
// then kills those left and describes them.
func leftovers(mark string, guard time.Duration) []string {
	var left []int
	for deadline := time.Now().Add(guard); ; time.Sleep(20 * time.Millisecond) {
		if left = markedProcs(mark); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	var desc []string
	for _, pid := range left {
		desc = append(desc, describeProc(pid))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return desc
}

// TestLeftoversFoundAndKilled: a process started with the mark is found,
// killed and described.
func TestLeftoversFoundAndKilled(t *testing.T) {
	mark := t.TempDir()
	cmd := exec.Command("sleep", "600")
	cmd.Env = append(os.Environ(), markEnv+"="+mark)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Until its exec the child shows the test's environment, without the
	// mark: wait for the exec.
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(markedProcs(mark), cmd.Process.Pid) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	left := leftovers(mark, 0)
	if len(left) != 1 || !strings.Contains(left[0], fmt.Sprintf("pid %d ", cmd.Process.Pid)) {
		t.Fatalf("leftovers %q, want the sleep, pid %d", left, cmd.Process.Pid)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Exited() {
		t.Fatalf("the leftover was not killed: %v", err)
	}
	if left := leftovers(mark, 0); len(left) != 0 {
		t.Fatalf("leftovers %q after the kill", left)
	}
}

// children returns the children of the process pid.
func children(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, c := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(c); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// stopPreExec stops (SIGSTOP) child if it has not exec'd yet and reports
// whether it did; a child that exec'd meanwhile is let go on.
func stopPreExec(child int, exe string) bool {
	if syscall.Kill(child, syscall.SIGSTOP) != nil {
		return false
	}
	// An execve in progress completes before the stop: wait for the stop,
	// then look at what the child runs.
	for {
		_, f, ok := procStat(child)
		if !ok {
			return false
		}
		if f[0] == "T" || f[0] == "t" {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if l, _ := os.Readlink("/proc/" + strconv.Itoa(child) + "/exe"); l != exe {
		_ = syscall.Kill(child, syscall.SIGCONT)
		return false
	}
	return true
}

// TestKilledWhileStartingPlugin: the weblog app SIGKILLed while it starts a
// plugin process (the child stopped between fork and exec, where a kill
// under load can find it for a while) leaves the store locked after its
// wait; waitStoreFree waits until the child released it, so the store can
// be read then, and the orphaned processes exit on their own.
func TestKilledWhileStartingPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the weblog app (seconds)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	a := &weblogApp{
		flowrun:     build(t, bin, "./examples/weblog/cmd/weblog"),
		app:         filepath.Join(moduleRoot(t), "examples", "weblog", "app.yaml"),
		data:        filepath.Join(dir, "data"),
		pluginCache: filepath.Join(os.TempDir(), "flowrun-plugin-test-cache"),
		input:       filepath.Join(dir, "access.log"),
		hours:       filepath.Join(dir, "hours.jsonl"),
		stderr:      filepath.Join(dir, "flowrun.stderr"),
		mark:        dir,
	}
	export := build(t, bin, "./examples/weblog/export")
	gen := build(t, bin, "./examples/weblog/gen")
	run(t, gen, "-lines", "500000", "-seed", "1", "-out", a.input)

	cmd, f := a.start(t)
	defer f.Close()
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	appExited := func() bool {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}
	var child int
	defer func() {
		if child != 0 {
			_ = syscall.Kill(child, syscall.SIGCONT)
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		checkNoLeftovers(t, a.mark)
	}()
	tail := func() []byte { b, _ := os.ReadFile(a.stderr); return b }

	// Plugin processes are started before the store is opened and after
	// (the second instance, restarts): once the app runs, kill its plugin
	// processes until a restart is caught between fork and exec.
	for !bytes.Contains(tail(), []byte("msg=running")) {
		if appExited() {
			t.Fatalf("the app exited before it ran: %v\n%s", waitErr, tail())
		}
		time.Sleep(5 * time.Millisecond)
	}
	const maxPluginKills = 200
	kills := 0
	for child == 0 {
		if appExited() {
			t.Fatalf("the app exited: %v\n%s", waitErr, tail())
		}
		pids := pluginPIDs(cmd.Process.Pid)
		if len(pids) == 0 { // being restarted
			time.Sleep(time.Millisecond)
			continue
		}
		if kills++; kills > maxPluginKills {
			t.Fatalf("no plugin restart caught between fork and exec in %d plugin kills", maxPluginKills)
		}
		before := map[int]bool{}
		for _, c := range children(cmd.Process.Pid) {
			before[c] = true
		}
		_ = syscall.Kill(pids[0], syscall.SIGKILL)
		// The app restarts the plugin at its next call, after a backoff:
		// catch the new child before its exec, or give up on it once it
		// exec'd.
		for restarted := false; !restarted && !appExited(); {
			for _, c := range children(cmd.Process.Pid) {
				if before[c] {
					continue
				}
				if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", c)); l == a.flowrun && stopPreExec(c, a.flowrun) {
					child = c
				}
				restarted = true
			}
		}
	}
	t.Logf("caught plugin process %d between fork and exec (plugin kill %d)", child, kills)

	_ = cmd.Process.Signal(syscall.SIGKILL)
	if <-exited; waitErr == nil {
		t.Fatal("the app drained before its kill")
	}

	var held string
	if err := waitStoreFree(a.data, func(h string) {
		held = h
		// Let the child exec: that closes its copies of the app's files.
		_ = syscall.Kill(child, syscall.SIGCONT)
	}); err != nil {
		t.Fatal(err)
	}
	if held == "" {
		t.Fatal("the store was not locked after the kill: the scenario did not happen")
	}
	t.Logf("store locked after the app's wait by %s", held)
	if !strings.Contains(held, fmt.Sprintf("pid %d ", child)) {
		t.Errorf("the store was locked by %s, want the stopped child %d among them", held, child)
	}
	if out, err := exec.Command(export, "-app", a.app, "-data", a.data).CombinedOutput(); err != nil {
		t.Fatalf("export after the wait: %v\n%s", err, out)
	}
}
