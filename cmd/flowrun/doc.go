// Command flowrun runs flowrun apps: it is runtime/cli's Main with the
// built-in flowlet types (runtime/builtin) and, so that the example runs out
// of the box, the weblog example's types (examples/weblog/flowlets).
//
//	flowrun validate app.yaml                 # every problem as file:line:col (alias: lint)
//	flowrun plan app.yaml                     # flowlets, queues, consumer groups (--dot, --json)
//	flowrun run --drain --data DIR app.yaml   # until SIGINT/SIGTERM, or until the input is used up
//	flowrun status|top APP                    # a running app, through its HTTP API
//	flowrun scale APP FLOWLET N               # change a running flowlet's instance count
//	flowrun state|queue|dlq ...               # read a stopped app's store; dlq replay
//	flowrun types                             # the flowlet types this binary has
//
// An app with flowlet types of its own builds the same CLI with them (see
// runtime/cli). specs/cli.md documents every command, flag, exit code and
// JSON format; flowrun --help lists them too.
package main
