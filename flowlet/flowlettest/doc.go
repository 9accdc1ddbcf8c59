// Package flowlettest runs flowlets without a runtime, for unit tests: a fake
// flowlet.Context that keeps state in maps and records emits and dead
// letters, with the same step semantics as the runtime (a failed step leaves
// no trace; a failed Emit fails the step even when the flowlet ignored its
// error).
//
// Simpler than the runtime: an error from Process aborts the whole step and
// is returned (the runtime undoes only that event, retries it retries.max
// times with backoff, then dead-letters it — Permanent errors at once); the
// test sees the error and decides. Events from Event have IDs; set Input
// yourself for a flowlet with several inputs.
//
//	ctx := flowlettest.New("parser")
//	err := ctx.Process(&Parser{}, flowlettest.Event("GET /a HTTP/1.1"))
//	got := ctx.Emits("pages") // payloads emitted on "pages" by committed steps
package flowlettest
