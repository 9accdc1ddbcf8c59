package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/internal/pluginhost"
)

// benchCtx is a step Context that does what the runtime's does with an emit
// (resolve the options, copy the payload) and keeps nothing, so both sides
// of the comparison pay the same for the steps' output.
type benchCtx struct {
	context.Context
	emits, dead int
	buf         []byte
	keys        int
	opts        flowlet.EmitOptions
}

func (c *benchCtx) Emit(output string, payload []byte, opts ...flowlet.EmitOption) error {
	c.opts.Resolve(opts) // as the runtime's Context does
	c.keys += len(c.opts.Keys)
	c.buf = append(c.buf[:0], payload...)
	c.emits++
	return nil
}
func (c *benchCtx) DeadLetter(payload []byte, reason string) error { c.dead++; return nil }
func (c *benchCtx) State(string) flowlet.Table                     { panic("unused") }
func (c *benchCtx) Counters(string) flowlet.Counters               { panic("unused") }
func (c *benchCtx) Name() string                                   { return "parser" }
func (c *benchCtx) Instance() int                                  { return 0 }
func (c *benchCtx) Instances() int                                 { return 1 }
func (c *benchCtx) Logger() *slog.Logger                           { return slog.Default() }

func events(lines [][]byte) []flowlet.Event {
	evs := make([]flowlet.Event, len(lines))
	for i, l := range lines {
		evs[i] = flowlet.Event{ID: fmt.Sprintf("%016x-%04x", 1<<40+i, i%65536), Input: "reader.out", Payload: l}
	}
	return evs
}

// BenchmarkParser measures the weblog parser in process and as a plugin
// (this directory, built on demand) at batch sizes 1, 100 and 500, in one
// run, and prints the plugin's throughput as a share of the in-process one:
//
//	go test -run '^$' -bench Parser -benchtime 2s ./examples/plugins/weblogparser
func BenchmarkParser(b *testing.B) {
	evs := events(genLines(50000, 0.01, 7))
	p, err := pluginhost.Open(context.Background(), "parser", ".", ".", pluginhost.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	rate := map[string]float64{}
	sizes := []int{1, 100, 500}
	for _, n := range sizes {
		for _, mode := range []string{"in-process", "plugin"} {
			b.Run(fmt.Sprintf("batch=%d/%s", n, mode), func(b *testing.B) {
				var f flowlet.BatchProcessor
				if mode == "plugin" {
					pf := p.New()
					if err := pf.(flowlet.Initializer).Init(flowlet.InitContext{Name: "parser", Instances: 1, Config: flowlet.NewConfig("parser", nil)}); err != nil {
						b.Fatal(err)
					}
					defer pf.(flowlet.Closer).Close()
					f = pf.(flowlet.BatchProcessor)
				} else {
					f = &flowlets.Parser{}
				}
				ctx := &benchCtx{Context: context.Background()}
				pos := 0
				b.ResetTimer()
				for range b.N {
					if pos+n > len(evs) {
						pos = 0
					}
					if err := f.ProcessBatch(ctx, evs[pos:pos+n]); err != nil {
						b.Fatal(err)
					}
					pos += n
				}
				r := float64(n*b.N) / b.Elapsed().Seconds()
				b.ReportMetric(r, "lines/s")
				b.ReportMetric(0, "ns/op")
				rate[fmt.Sprintf("%d/%s", n, mode)] = r
			})
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nweblog parser, plugin vs in process (%s):\n", b.Name())
	fmt.Fprintf(&sb, "%8s %16s %16s %8s\n", "batch", "in-process l/s", "plugin l/s", "ratio")
	keys := make([]int, 0, len(sizes))
	keys = append(keys, sizes...)
	sort.Ints(keys)
	for _, n := range keys {
		in, pl := rate[fmt.Sprintf("%d/in-process", n)], rate[fmt.Sprintf("%d/plugin", n)]
		if in == 0 || pl == 0 {
			continue
		}
		fmt.Fprintf(&sb, "%8d %16.0f %16.0f %7.1f%%\n", n, in, pl, 100*pl/in)
	}
	fmt.Fprint(os.Stdout, sb.String())
}
