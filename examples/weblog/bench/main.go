package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type result struct {
	wall, user, sys time.Duration
	maxRSS          int64 // bytes
	mem             memTrace
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	lines := fs.Int("lines", 1000000, "lines of the generated log")
	seed := fs.Uint64("seed", 1, "generator seed")
	runs := fs.Int("runs", 3, "measured runs (the median is reported)")
	noSync := fs.Bool("no-sync", false, "run with --no-sync (commits survive kill -9, not power loss)")
	verify := fs.Bool("verify", true, "check every run's results with the verifier")
	app := fs.String("app", "examples/weblog/app.yaml", "the app file")
	keep := fs.Bool("keep", false, "keep the work directory")
	runFlags := fs.String("run-flags", "", "more flags for weblog run, space-separated (e.g. \"--max-backlog -1\")")
	weblogBin := fs.String("weblog", "", "a prebuilt weblog binary to run (default: build ./examples/weblog/cmd/weblog)")
	sample := fs.Duration("sample", 250*time.Millisecond, "sampling interval of the child's /proc memory figures (0: off)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 || *runs < 1 || *lines < 1 {
		fs.Usage()
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(stderr, "bench:", err); return 1 }

	dir, err := os.MkdirTemp("", "weblog-bench-")
	if err != nil {
		return fail(err)
	}
	if *keep {
		fmt.Fprintln(stderr, "work directory", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	appPath, err := filepath.Abs(*app)
	if err != nil {
		return fail(err)
	}
	bins := map[string]string{}
	for _, pkg := range []string{"cmd/weblog", "gen", "export", "verify"} {
		if pkg == "cmd/weblog" && *weblogBin != "" {
			if bins["weblog"], err = filepath.Abs(*weblogBin); err != nil {
				return fail(err)
			}
			continue
		}
		out := filepath.Join(dir, filepath.Base(pkg))
		if b, err := exec.Command("go", "build", "-o", out, "./examples/weblog/"+pkg).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("go build ./examples/weblog/%s (run from the module root): %v\n%s", pkg, err, b))
		}
		bins[filepath.Base(pkg)] = out
	}
	logFile := filepath.Join(dir, "access.log")
	if b, err := exec.Command(bins["gen"], "-lines", strconv.Itoa(*lines), "-seed", strconv.FormatUint(*seed, 10), "-out", logFile).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("gen: %v\n%s", err, b))
	}
	fi, err := os.Stat(logFile)
	if err != nil {
		return fail(err)
	}
	sync := "durable (fsync per commit group)"
	if *noSync {
		sync = "--no-sync"
	}
	fmt.Fprintf(stdout, "weblog end to end: %d lines (%.0f MB), %s, %d run(s)\n", *lines, float64(fi.Size())/1e6, sync, *runs)

	var rs []result
	for i := range *runs {
		data := filepath.Join(dir, "data"+strconv.Itoa(i))
		args := []string{"run", "--drain", "--progress", "never", "--data", data}
		if *noSync {
			args = append(args, "--no-sync")
		}
		if *runFlags != "" {
			args = append(args, strings.Fields(*runFlags)...)
		}
		cmd := exec.Command(bins["weblog"], append(args, appPath)...)
		cmd.Env = append(os.Environ(), "WEBLOG_INPUT="+logFile, "WEBLOG_HOURS="+filepath.Join(dir, "hours"+strconv.Itoa(i)+".jsonl"))
		var errb bytes.Buffer
		cmd.Stderr = &errb
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return fail(fmt.Errorf("run %d: %v", i, err))
		}
		stopSampling := sampleMemory(cmd.Process.Pid, *sample)
		err := cmd.Wait()
		mem := stopSampling()
		if err != nil {
			return fail(fmt.Errorf("run %d: %v\n%s", i, err, tail(errb.String())))
		}
		r := result{wall: time.Since(start), mem: mem}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.maxRSS = ru.Maxrss * 1024 // KiB on Linux
			r.user = time.Duration(ru.Utime.Nano())
			r.sys = time.Duration(ru.Stime.Nano())
		}
		rs = append(rs, r)
		status := "not verified"
		if *verify {
			res := filepath.Join(dir, "results"+strconv.Itoa(i)+".json")
			if b, err := exec.Command(bins["export"], "-app", appPath, "-data", data, "-out", res).CombinedOutput(); err != nil {
				return fail(fmt.Errorf("export: %v\n%s", err, b))
			}
			b, err := exec.Command(bins["verify"], "-log", logFile, "-results", res).CombinedOutput()
			if err != nil {
				return fail(fmt.Errorf("run %d: results differ: %v\n%s", i, err, b))
			}
			status = "verified " + strings.SplitN(string(b), ":", 2)[0]
		}
		fmt.Fprintf(stdout, "run %d: %7.2f s  %8.0f lines/s  max RSS %4d MiB  CPU %.1f s user + %.1f s sys  (%s)\n",
			i, r.wall.Seconds(), float64(*lines)/r.wall.Seconds(), r.maxRSS>>20, r.user.Seconds(), r.sys.Seconds(), status)
		if m := r.mem.String(); m != "" {
			fmt.Fprintf(stdout, "       %s\n", m)
		}
		if !*keep {
			os.RemoveAll(data)
		}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].wall < rs[j].wall })
	m := rs[(len(rs)-1)/2]
	maxRSS := int64(0)
	for _, r := range rs {
		maxRSS = max(maxRSS, r.maxRSS)
	}
	fmt.Fprintf(stdout, "median: %.0f lines/s (%.2f s); max RSS over runs %d MiB\n", float64(*lines)/m.wall.Seconds(), m.wall.Seconds(), maxRSS>>20)
	return 0
}

func tail(s string) string {
	if len(s) > 3000 {
		return "…" + s[len(s)-3000:]
	}
	return s
}
