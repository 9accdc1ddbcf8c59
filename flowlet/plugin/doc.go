// Package plugin runs a flowlet in a process of its own, as a plugin of the
// flowrun host (specs/plugins.md). A plugin author writes the same flowlet as
// a built-in one (package flowlet: Process or ProcessBatch, Generate, Tick,
// Init, Close) and serves it from main:
//
//	package main
//
//	import (
//		"github.com/flowrun/flowrun/flowlet"
//		"github.com/flowrun/flowrun/flowlet/plugin"
//	)
//
//	func main() {
//		plugin.Serve(func() flowlet.Flowlet { return &Upper{} },
//			flowlet.TypeInfo{Outputs: []string{"out"}, Doc: "upper-cases lines"})
//	}
//
// The app YAML names the plugin's package directory (built on demand) or its
// binary in the flowlet's `plugin:` field. The host starts one process per
// flowlet instance and talks to it over gRPC (hashicorp/go-plugin, with a
// versioned handshake and automatic mutual TLS). Each step is one call: the
// host sends the batch, the SDK calls the flowlet with a flowlet.Context
// whose emits and writes are collected and returned with the call's result;
// the host applies them in the step's transaction. State reads (Get, Scan)
// call back to the host, so they see the transaction's snapshot and the
// step's own writes.
//
// Differences from an in-process flowlet, all within the flowlet.Context
// contract: Emit, Put, Delete and Add check what they can locally (the key
// size) and return nil; the host applies them when the step's call returns
// (writes also with the next read), and a failure there fails the step. A
// panic in flowlet code is recovered and fails the step, as in the runtime.
// A crash or a hang of the process fails the step too; the host restarts the
// process (and calls Init again) before the next step.
// Goroutines a call starts may use its Context until it returns (their
// calls are serialized, as in the runtime).
//
// The flowlet.TypeInfo given to Serve travels to the host, SingleInstance
// included. A type that implements flowlet.ConfigChecker has its config
// checked by `flowrun validate` and before every run, before anything is
// created (the contract's CheckConfig call, on a fresh value): a
// *flowlet.ConfigError is reported at the flowlet in the app file, naming
// its field.
//
// Steps travel over the step channel (package flowlet/plugin/channel): a
// connection of its own, opened after Init, on which each step is one frame
// each way.
//
// The process runs with GOMAXPROCS=1 unless the environment sets GOMAXPROCS
// (the host's Options.Env, say): it makes one step at a time, and spare Ps
// only compete with the host for the cores. A flowlet that parallelizes its
// own work may call runtime.GOMAXPROCS in its Init.
//
// Logging: the Logger of InitContext and Context writes JSON lines to the
// process's stderr, which the host logs, tagged with the flowlet and
// instance; anything else written to stderr is logged as well.
package plugin
