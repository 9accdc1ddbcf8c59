// Command bench measures the weblog example end to end: lines per second
// through `flowrun run --drain` on a generated log, with the child
// process's maximum resident set size and CPU time (getrusage of the child,
// no /usr/bin/time needed), and checks the results with the verifier.
//
//	go run ./examples/weblog/bench [-lines 1000000] [-runs 3] [-no-sync] [-verify=true] [-app FILE] [-run-flags FLAGS] [-weblog BIN] [-sample 250ms]
//
// It builds the weblog CLI (examples/weblog/cmd/weblog), the generator, the
// exporter and the verifier into a temporary directory, generates the log
// once (-seed), and for each run starts from an empty data directory.
//
// While a run goes, /proc/PID/status and /proc/PID/io of the child are
// sampled every -sample: the run's line then shows the anonymous memory
// (RssAnon: Go heap, Badger's allocations) at a quarter, half, three
// quarters and all of the bytes the child wrote, and the peaks of RssAnon and
// RssFile (file-backed pages, mostly the memory-mapped value log and
// tables). Flat RssAnon against bytes written is what "bounded memory"
// means; RssFile is page cache the kernel can drop. -weblog runs a prebuilt
// weblog binary instead of building one (e.g. an older commit's, for a
// before/after comparison in one session).
package main
