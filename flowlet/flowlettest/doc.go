// Package flowlettest runs flowlets without a runtime, for unit tests: a fake
// flowlet.Context that keeps state in maps and records emits, with the same
// step semantics as the runtime (a failed step leaves no trace).
//
//	ctx := flowlettest.New("parser")
//	err := ctx.Process(&Parser{}, flowlettest.Event("GET /a HTTP/1.1"))
//	got := ctx.Emits("pages") // payloads emitted on "pages" by committed steps
package flowlettest
