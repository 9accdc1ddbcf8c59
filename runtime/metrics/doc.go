// Package metrics exports a running flowrun app in the Prometheus format
// through the official client library. Every value is read from the app
// when scraped (no second set of counters to keep in step); specs/http.md
// lists the metrics.
//
//	http.Handle("/metrics", metrics.Handler(metrics.Registry(app, nil)))
//
// Registry adds the Go runtime and process collectors to the app's
// Collector. Its status function may return a cached runtime.Status (nil:
// App.Status, which reads every queue's keys); runtime/httpapi serves
// /metrics this way.
package metrics
