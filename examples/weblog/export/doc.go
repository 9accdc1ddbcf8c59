// Command export writes the weblog app's results as the verifier's results
// JSON (examples/weblog/README.md, "Results JSON format"), read from the
// app's store after it has stopped:
//
//	export [-app examples/weblog/app.yaml] [-data DIR] [-out results.json] [-dlq FILE]
//
// It finds the weblog flowlets in the app file by type, so the app may name
// them as it likes, and reads:
//
//	page_views      counters "views" of the weblog_page_views flowlet
//	visitors        counters "hits" of the weblog_unique_visitors flowlet
//	status_counts   counters "counts" of the weblog_status_counts flowlet
//	bytes_per_hour  counters "bytes" of the weblog_bytes_per_hour flowlet,
//	                for every hour whose counter "lines" is > 0
//	lines_per_hour  counters "lines" of the same flowlet, those > 0
//	malformed       entries in the dead-letter queue of every weblog_parser
//	                and of every flowlet that feeds one (lines over the
//	                reader's max_line_bytes never reach a parser)
//
// Values longer than a state key (paths or clients over 4 KiB) are stored
// under a hashed key and resolved through the flowlet's table "long_keys".
// With -dlq, it also writes the payloads of the parsers' dead letters (the
// malformed lines) to FILE, each followed by "\n".
//
// The store must not be in use: stop the app first (or run it with --drain).
package main
