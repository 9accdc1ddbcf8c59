// Package expect computes, independently of any flowrun code, the results
// that the weblog example pipeline must produce for a given access log, and
// compares them with the results exported by the application.
//
// The rules implemented here are the ones written down in
// examples/weblog/README.md ("Parsing rules"). The pipeline's flowlets must be
// written from that prose and must NOT import this package: the point of the
// verifier is to be a second, independent implementation (a test of this
// package fails if a non-test Go file outside verify/ and gen/ imports it).
//
// Compute reads a log into Results; ReadResults reads the application's
// results JSON strictly; Compare and Report say where they differ. The
// verify command is its command line.
package expect
