package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	fs.IntVar(&cfg.lines, "lines", 200000, "number of lines to write")
	fs.Float64Var(&cfg.malformed, "malformed", 0.02, "fraction of malformed lines (exactly round(lines*fraction) are malformed)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "random seed; the same flags give the same output")
	out := fs.String("out", "", "output file (default stdout)")
	start := fs.String("start", defaultStart, "RFC 3339 time of the first line; its UTC offset is the log's time zone")
	fs.DurationVar(&cfg.span, "span", 6*time.Hour, "approximate time covered by the log")
	fs.IntVar(&cfg.ips, "ips", 5000, "number of distinct client IPs (about 10% IPv6)")
	fs.IntVar(&cfg.paths, "paths", 1000, "number of distinct normalised paths (Zipf-like popularity)")
	fs.Float64Var(&cfg.crlf, "crlf", 0.001, `fraction of well-formed lines ending in "\r\n"`)
	fs.IntVar(&cfg.huge, "huge", 0, "how many of the malformed lines are longer than 1 MiB (the reader's limit: it dead-letters them itself)")
	finalNewline := fs.Bool("final-newline", true, `end the last line with "\n"`)
	stats := fs.Bool("stats", false, "print counts per line kind to stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if cfg.start, err = time.Parse(time.RFC3339, *start); err != nil {
		fmt.Fprintf(stderr, "gen: -start: %v\n", err)
		return 2
	}
	switch {
	case fs.NArg() != 0:
		err = errors.New("unexpected arguments")
	case cfg.lines < 0:
		err = errors.New("-lines must be >= 0")
	case !(cfg.malformed >= 0 && cfg.malformed <= 1):
		err = errors.New("-malformed must be in [0, 1]")
	case !(cfg.crlf >= 0 && cfg.crlf <= 1):
		err = errors.New("-crlf must be in [0, 1]")
	case cfg.ips < 1 || cfg.paths < 1:
		err = errors.New("-ips and -paths must be >= 1")
	case cfg.span < 0:
		err = errors.New("-span must be >= 0")
	case cfg.huge < 0 || cfg.huge > int(math.Round(float64(cfg.lines)*cfg.malformed)):
		err = errors.New("-huge must be in [0, malformed lines]")
	}
	if err != nil {
		fmt.Fprintf(stderr, "gen: %v\n", err)
		return 2
	}

	w := stdout
	var f *os.File
	if *out != "" {
		if f, err = os.Create(*out); err != nil {
			fmt.Fprintf(stderr, "gen: %v\n", err)
			return 2
		}
		w = f
	}
	counts, err := generate(w, cfg, *finalNewline)
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gen: %v\n", err)
		return 2
	}
	if *stats {
		for k, n := range counts {
			if n > 0 {
				fmt.Fprintf(stderr, "%-14s %d\n", lineKind(k).String()+":", n)
			}
		}
	}
	return 0
}

// generate writes cfg.lines lines to w and returns how many of each kind.
func generate(w io.Writer, cfg config, finalNewline bool) ([numKinds]int, error) {
	var counts [numKinds]int
	bw := bufio.NewWriterSize(w, 1<<20)
	g := newGenerator(cfg)
	for i := 0; i < cfg.lines; i++ {
		line, k := g.next()
		counts[k]++
		if !finalNewline && i == cfg.lines-1 && len(line) == 0 {
			line = []byte{'\r'} // an empty final line without "\n" would not be a line
		}
		bw.Write(line)
		if finalNewline || i < cfg.lines-1 {
			bw.WriteByte('\n')
		}
	}
	return counts, bw.Flush()
}
