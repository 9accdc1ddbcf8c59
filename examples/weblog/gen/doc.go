// Command gen writes a synthetic Apache combined-format access log for the
// weblog example, with a controlled share of varied malformed lines. The
// output is a deterministic function of the flags (and the Go version).
//
//	gen -lines 1000000 -seed 7 -out access.log
//
// See examples/weblog/README.md for what is generated and why.
package main
