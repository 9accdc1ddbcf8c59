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
package main

import (
	"github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/flowlet/plugin"
)

func main() { plugin.ServeType(flowlets.TypeParser) }
