package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/flowrun/flowrun/examples/weblog/verify/expect"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	logPath := fs.String("log", "", "access log to read (required)")
	resultsPath := fs.String("results", "", "results JSON exported by the application")
	printExpected := fs.Bool("print", false, "print the expected results JSON instead of comparing")
	limit := fs.Int("limit", 20, "maximum number of differences to list (0 = all)")
	reasons := fs.Bool("reasons", false, "also print line counts and malformed lines by reason to stderr")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: verify -log FILE (-results FILE | -print) [-limit N] [-reasons]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 0 || *logPath == "" || (*resultsPath == "") == !*printExpected {
		fs.Usage()
		return 2
	}

	want, stats, err := computeFile(*logPath)
	if err != nil {
		fmt.Fprintf(stderr, "verify: %v\n", err)
		return 2
	}
	if *reasons {
		fmt.Fprintf(stderr, "lines %d, well-formed %d, malformed %d\n", stats.Lines, stats.WellFormed, stats.Lines-stats.WellFormed)
		for r := 1; r < expect.NumReasons; r++ {
			if n := stats.ByReason[r]; n > 0 {
				fmt.Fprintf(stderr, "  %-13s %d\n", expect.Reason(r).String()+":", n)
			}
		}
	}
	if *printExpected {
		bw := bufio.NewWriter(stdout)
		if err := expect.WriteJSON(bw, want); err == nil {
			err = bw.Flush()
		}
		if err != nil {
			fmt.Fprintf(stderr, "verify: %v\n", err)
			return 2
		}
		return 0
	}

	f, err := os.Open(*resultsPath)
	if err != nil {
		fmt.Fprintf(stderr, "verify: %v\n", err)
		return 2
	}
	got, err := expect.ReadResults(bufio.NewReader(f))
	f.Close()
	if err != nil {
		fmt.Fprintf(stderr, "verify: %s: not in the canonical results format: %v\n", *resultsPath, err)
		return 2
	}
	diffs := expect.Compare(want, got)
	if err := expect.Report(stdout, want, got, diffs, *limit); err != nil {
		fmt.Fprintf(stderr, "verify: %v\n", err)
		return 2
	}
	if len(diffs) > 0 {
		return 1
	}
	return 0
}

func computeFile(path string) (*expect.Results, expect.Stats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, expect.Stats{}, err
	}
	defer f.Close()
	res, stats, err := expect.Compute(f)
	if err != nil {
		return nil, expect.Stats{}, fmt.Errorf("%s: %w", path, err)
	}
	return res, stats, nil
}
