package flowlets

import "github.com/flowrun/flowrun/flowlet"

// Type names registered by this package.
const (
	TypeParser         = "weblog_parser"
	TypePageViews      = "weblog_page_views"
	TypeUniqueVisitors = "weblog_unique_visitors"
	TypeStatusCounts   = "weblog_status_counts"
	TypeBytesPerHour   = "weblog_bytes_per_hour"
)

// init registers the weblog types with package flowlet, as built-in types
// register: importing the package (for its side effect) is enough.
func init() {
	flowlet.Register(TypeParser, func() flowlet.Flowlet { return &Parser{} }, flowlet.TypeInfo{
		Outputs: []string{OutPages, OutVisitors, OutStatus, OutBytes},
		Doc:     "weblog: parses combined-format access log lines; malformed lines fail (dead-letter queue)",
	})
	flowlet.Register(TypePageViews, func() flowlet.Flowlet { return &Counter{Table: ViewsCounters} }, flowlet.TypeInfo{
		Sink: true,
		Doc:  "weblog: page views per normalised path (counters \"" + ViewsCounters + "\")",
	})
	flowlet.Register(TypeUniqueVisitors, func() flowlet.Flowlet { return &Counter{Table: HitsCounters} }, flowlet.TypeInfo{
		Sink: true,
		Doc:  "weblog: requests per client HOST (counters \"" + HitsCounters + "\")",
	})
	flowlet.Register(TypeStatusCounts, func() flowlet.Flowlet { return &Counter{Table: StatusCounters} }, flowlet.TypeInfo{
		Sink: true,
		Doc:  "weblog: requests per status code (counters \"" + StatusCounters + "\")",
	})
	flowlet.Register(TypeBytesPerHour, func() flowlet.Flowlet { return &BytesPerHour{} }, flowlet.TypeInfo{
		Outputs: []string{OutHours},
		Doc:     "weblog: bytes per UTC hour (counters \"" + BytesCounters + "\"); a tick flushes closed hours to \"" + OutHours + "\"",
	})
}
