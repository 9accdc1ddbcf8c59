// Package pluginhost runs plugin flowlets (specs/plugins.md): flowlets in
// processes of their own, written with package flowlet/plugin in Go or
// against proto/flowlet.proto in any language, and started over
// hashicorp/go-plugin's gRPC protocol with a versioned handshake and
// automatic mutual TLS.
//
// Open turns a flowlet's `plugin:` field (a Go package directory, built on
// demand into a content-keyed cache, or a binary) into a flowlet.Type whose
// values the runtime uses exactly like a built-in flowlet's: each value is
// one instance, backed by one plugin process, and implements
// flowlet.BatchProcessor (one RPC per step), flowlet.Initializer and
// flowlet.Closer, plus flowlet.Ticker and flowlet.Source when the plugin
// does. Emits, writes and dead letters a step returns are applied through
// the step's flowlet.Context; state reads from the plugin call back to that
// Context, so they see the step's transaction.
//
// Plugin.CheckConfig has the plugin check a flowlet's config without
// side effects (the contract's optional CheckConfig call), so that a
// mistake is found before the app starts.
//
// An input event the wire cannot carry (an event time outside int64 Unix
// nanoseconds, 0 for none: before 1678, after 2262, the epoch itself; key
// names and values or a trace id that are not UTF-8) is refused with a
// permanent error, as the SDK refuses such an emit: the runtime
// dead-letters it, intact, instead of the plugin seeing another time or
// none, or the call failing at every attempt.
//
// A plugin that crashes, exits or exceeds the per-call deadline makes the
// call fail with a *CallError (the runtime aborts the step and the events
// come again); the process is killed and a new one is started, with
// backoff, at the next call.
package pluginhost
