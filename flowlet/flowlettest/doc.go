// Package flowlettest runs flowlets without a runtime, for unit tests: a fake
// flowlet.Context that keeps state in maps and records emits and dead
// letters, with the same step semantics as the runtime (a failed step leaves
// no trace; a failed Emit fails the step even when the flowlet ignored its
// error). As in the runtime, the flowlet gets a Context of its own for each
// call: goroutines of the call may use it, and once the call returned it
// (and the tables, counters and iterators it gave out) answers
// flowlet.ErrStepEnded; the events' payloads it gets are copies, overwritten
// once the step ended, so a flowlet that keeps a payload without copying it
// (which breaks as a plugin, whose buffers the next batch reuses) fails its
// tests.
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
