package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flowrun/flowrun/tx"
)

// The tx histogram's power-of-two microsecond buckets become cumulative
// Prometheus buckets in seconds.
func TestHistogram(t *testing.T) {
	var h tx.Histogram
	h.Counts[0] = 1  // < 1µs
	h.Counts[3] = 2  // [4µs, 8µs)
	h.Counts[10] = 4 // [512µs, 1024µs)
	h.Count = 7
	h.Sum = 3 * time.Millisecond
	d := prometheus.NewDesc("x", "x", []string{"flowlet"}, nil)
	var m dto.Metric
	if err := histogram(d, h, "f").Write(&m); err != nil {
		t.Fatal(err)
	}
	hm := m.GetHistogram()
	if hm.GetSampleCount() != 7 || hm.GetSampleSum() != 0.003 {
		t.Fatalf("count %d sum %v", hm.GetSampleCount(), hm.GetSampleSum())
	}
	want := map[float64]uint64{1e-6: 1, 4e-6: 1, 8e-6: 3, 512e-6: 3, 1024e-6: 7, h.BucketUpper(30).Seconds(): 7}
	got := map[float64]uint64{}
	for _, b := range hm.GetBucket() {
		got[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	for ub, c := range want {
		if got[ub] != c {
			t.Errorf("bucket ≤%gs: %d, want %d", ub, got[ub], c)
		}
	}
	if len(got) != len(h.Counts)-1 { // the last is +Inf
		t.Errorf("%d buckets, want %d", len(got), len(h.Counts)-1)
	}
}

// tx's last bucket also holds every longer duration (its observe clamps
// there): it is Prometheus's +Inf, not a finite bucket, or a 40-minute step
// read as one under ~36 minutes.
func TestHistogramLastBucketOpen(t *testing.T) {
	var h tx.Histogram
	h.Counts[len(h.Counts)-1] = 1 // a 40-minute step
	h.Count = 1
	h.Sum = 40 * time.Minute
	var m dto.Metric
	if err := histogram(prometheus.NewDesc("x", "x", nil, nil), h).Write(&m); err != nil {
		t.Fatal(err)
	}
	for _, b := range m.GetHistogram().GetBucket() {
		if b.GetCumulativeCount() != 0 {
			t.Errorf("bucket ≤%gs counts %d, want the step only in +Inf", b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	if c := m.GetHistogram().GetSampleCount(); c != 1 {
		t.Errorf("count %d, want 1", c)
	}
}

// A snapshot taken while a step is observed may read its bucket and not yet
// the count: the count (+Inf) is never below a finite bucket.
func TestHistogramCountCoversBuckets(t *testing.T) {
	var h tx.Histogram
	h.Counts[3] = 2
	h.Count = 1 // the second observation's count not read yet
	var m dto.Metric
	if err := histogram(prometheus.NewDesc("x", "x", nil, nil), h).Write(&m); err != nil {
		t.Fatal(err)
	}
	hm := m.GetHistogram()
	for _, b := range hm.GetBucket() {
		if b.GetCumulativeCount() > hm.GetSampleCount() {
			t.Errorf("bucket ≤%gs counts %d, over the count %d", b.GetUpperBound(), b.GetCumulativeCount(), hm.GetSampleCount())
		}
	}
}

// A label value that is not UTF-8 (a queue or group name read from a
// damaged store) fails the scrape with an error: MustNewConstMetric and
// MustNewConstHistogram panicked in Collect, which ends the process.
func TestLabelNotUTF8(t *testing.T) {
	d := prometheus.NewDesc("x", "x", []string{"queue"}, nil)
	for name, m := range map[string]func() prometheus.Metric{
		"gauge":     func() prometheus.Metric { return constMetric(d, prometheus.GaugeValue, 1, "q\xff") },
		"histogram": func() prometheus.Metric { return histogram(d, tx.Histogram{}, "q\xff") },
	} {
		var pm dto.Metric
		if err := m().Write(&pm); err == nil {
			t.Errorf("%s with label q\\xff written: %v", name, &pm)
		}
	}
}

// One metric that cannot be written (a label that is not UTF-8) is left out
// of the scrape; the others are served. The whole scrape answered 500.
func TestScrapeServesAroundABadMetric(t *testing.T) {
	r := prometheus.NewRegistry()
	d := prometheus.NewDesc("flowrun_test_depth", "x", []string{"queue"}, nil)
	r.MustRegister(collectFunc(func(ch chan<- prometheus.Metric) {
		ch <- constMetric(d, prometheus.GaugeValue, 1, "good")
		ch <- constMetric(d, prometheus.GaugeValue, 2, "q\xff")
	}, d))
	w := httptest.NewRecorder()
	Handler(r).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `flowrun_test_depth{queue="good"} 1`) {
		t.Fatalf("scrape: %d\n%s", w.Code, w.Body)
	}
}

// collectFunc is a collector of one description whose metrics f sends.
type collectFuncCollector struct {
	f func(chan<- prometheus.Metric)
	d *prometheus.Desc
}

func collectFunc(f func(chan<- prometheus.Metric), d *prometheus.Desc) prometheus.Collector {
	return collectFuncCollector{f, d}
}

func (c collectFuncCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d }
func (c collectFuncCollector) Collect(ch chan<- prometheus.Metric) { c.f(ch) }
