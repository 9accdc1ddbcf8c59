// Command weblogparser is the weblog example's parser (the weblog_parser
// type of examples/weblog/flowlets) as a plugin flowlet: the same Go type,
// served from a process of its own with flowlet/plugin. An app uses it with
//
//	parser:
//	  plugin: ../plugins/weblogparser   # relative to the app file's directory
//	  instances: 2
//	  batch_size: 500
//
// and the host builds it on demand (specs/plugins.md). Dead-lettering of
// malformed lines works as in process: the runtime's Context can dead-letter,
// so the plugin's can.
//
// It is not run by hand: `weblog run examples/weblog/app.yaml` (or
// `flowrun run`, or `validate`) builds it into the plugin cache on first use.
// Its tests run the weblog app with it, kill its processes with SIGKILL
// mid-run and check the results against the independent verifier:
//
//	go test ./examples/plugins/weblogparser
package main
