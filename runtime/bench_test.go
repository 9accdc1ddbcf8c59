package runtime_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/runtime"
)

type benchCounter struct{}

func (benchCounter) Process(ctx flowlet.Context, ev flowlet.Event) error {
	k, _ := ev.Key("k")
	return ctx.Counters("n").Add([]byte(k), 1)
}

func init() {
	flowlet.Register("t_bench_counter", func() flowlet.Flowlet { return benchCounter{} }, flowlet.TypeInfo{Sink: true})
}

// BenchmarkGeneratorCounter: generator → counter (hash by key, 2 instances,
// batch 500), b.N events, drained; reports events/s end to end.
//
//	go test ./runtime -run '^$' -bench GeneratorCounter -benchtime 200000x
func BenchmarkGeneratorCounter(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			dir := b.TempDir()
			yaml := fmt.Sprintf(`
app: bench
flowlets:
  gen: {type: generator, config: {count: %d, payload: "event {seq}", keys: {k: "{mod:1000}"}, batch: 2000}}
  count: {type: t_bench_counter, instances: 2, batch_size: 500}
connections:
  - {from: gen, to: count, strategy: hash, key: k}
`, b.N)
			a, err := runtime.Open(plan(b, dir, yaml), runtime.Options{NoSync: !sync, DataDir: filepath.Join(dir, "data"), Drain: true})
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			b.ResetTimer()
			start := time.Now()
			if err := a.Run(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}
