// Package flowlets holds the weblog example's flowlet types and registers
// them with flowlet.Register in init, so importing the package is enough:
//
//	import _ "github.com/flowrun/flowrun/examples/weblog/flowlets"
//
// The types (TypeParser and friends): weblog_parser (Parser) parses Apache
// combined-format lines (LineParser) into compact count records (record.go)
// on the outputs pages, visitors, status and bytes, and dead-letters
// malformed lines; weblog_page_views, weblog_unique_visitors and
// weblog_status_counts (Counter) add them to counters; weblog_bytes_per_hour
// (BytesPerHour) sums bytes per UTC hour and its tick emits closed hours.
//
// The flowlets are written from the rules of examples/weblog/README.md, not
// from the verifier: they must not import examples/weblog/verify/expect.
// cmd/flowrun and examples/weblog/cmd/weblog build them in, and
// examples/plugins/weblogparser serves the parser as a plugin. Their unit
// tests run under flowlettest:
//
//	go test ./examples/weblog/flowlets
package flowlets
