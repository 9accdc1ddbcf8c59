package main

import (
	"github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/flowlet/plugin"
)

func main() { plugin.ServeType(flowlets.TypeParser) }
