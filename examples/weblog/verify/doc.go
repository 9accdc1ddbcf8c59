// Command verify recomputes, independently of flowrun, the results the weblog
// pipeline must produce for an access log and compares them with the
// results exported by the application.
//
//	verify -log access.log -results results.json   # PASS (exit 0) or FAIL (exit 1)
//	verify -log access.log -print                  # print the expected results JSON
//
// Exit status: 0 pass, 1 fail, 2 usage or I/O error (including a results
// file that is not in the canonical format). See examples/weblog/README.md.
package main
