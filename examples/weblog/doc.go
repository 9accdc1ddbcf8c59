// Package weblog is the weblog example: web access log analytics, exactly
// once (README.md). It holds no code of its own, only the app files and the
// tests that check them:
//
//   - app.yaml: file reader → parser (the plugin examples/plugins/weblogparser)
//     → page views, unique visitors, status counts and bytes per hour,
//     closed hours to a file; app-builtin.yaml runs the parser in process.
//   - app_test.go checks that both app files plan and validate.
//   - e2e_test.go is the exactly-once test: the app killed with SIGKILL (its
//     plugin processes too) at random moments and restarted, then drained;
//     its exported results must equal the independent verifier's exactly.
//   - kill_test.go runs the app for the tests (weblogApp) and checks what a
//     kill leaves: the store locked a moment by a plugin process started
//     between fork and exec (waitStoreFree), and no process left running.
//
// The subpackages: flowlets (the flowlet types), cmd/weblog (the CLI with
// them built in), gen (a synthetic log), export (results from the store),
// verify (the independent computation) and bench (end-to-end throughput).
// Run the app by hand as README.md's quick start shows, or the test:
//
//	go test ./examples/weblog -run E2E -v
package weblog
