// Package cli is the flowrun command line, as a library: cmd/flowrun is
// Main with the built-in flowlets, and an app with its own flowlet types
// builds the same CLI by importing its flowlet packages (which call
// flowlet.Register in init) and calling Main:
//
//	package main
//
//	import (
//		_ "example.com/myapp/flowlets"
//		"github.com/flowrun/flowrun/runtime/cli"
//	)
//
//	func main() { cli.Main() }
//
// specs/cli.md documents the commands, flags, exit codes and JSON formats.
package cli
