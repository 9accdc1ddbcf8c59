// Command weblog is the flowrun CLI with the weblog example's flowlet types
// built in (the way runtime/cli documents for apps with their own types):
// every flowrun command works, and examples/weblog/app.yaml runs.
//
//	go build -o weblog ./examples/weblog/cmd/weblog
//	WEBLOG_INPUT=/tmp/access.log ./weblog run --drain --data /tmp/weblog-data examples/weblog/app.yaml
package main
