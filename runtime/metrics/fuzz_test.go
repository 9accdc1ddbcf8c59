package metrics

import (
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flowrun/flowrun/tx"
)

// FuzzLabelValues builds each kind of metric the collector makes with any
// label value (flowlet, queue and group names come from the plan, and
// queue and group names from the store too): no panic, which in Collect
// ends the process (the registry runs it on a goroutine of its own); a
// valid label is kept as it is.
//
//	go test ./runtime/metrics -run '^$' -fuzz FuzzLabelValues -fuzztime 30s
func FuzzLabelValues(f *testing.F) {
	for _, s := range []string{"", "cnt", "gen.out", "a\"b\\c\nd", "é", "\xff", "a\xc3"} {
		f.Add(s)
	}
	d := prometheus.NewDesc("x", "x", []string{"queue"}, prometheus.Labels{"app": "a"})
	f.Fuzz(func(t *testing.T, label string) {
		for _, m := range []prometheus.Metric{
			constMetric(d, prometheus.CounterValue, 1, label),
			constMetric(d, prometheus.GaugeValue, 1, label),
			histogram(d, tx.Histogram{}, label),
		} {
			var pm dto.Metric
			err := m.Write(&pm)
			if utf8.ValidString(label) {
				if err != nil {
					t.Fatalf("label %q: %v", label, err)
				}
				if got := pm.GetLabel()[1].GetValue(); got != label {
					t.Fatalf("label %q written as %q", label, got)
				}
			} else if err == nil {
				t.Fatalf("label %q (not UTF-8) written", label)
			}
		}
	})
}
