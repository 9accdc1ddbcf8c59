package main

import (
	"github.com/flowrun/flowrun/runtime/cli"

	// The weblog example's flowlet types ship as built-ins, so that
	// `flowrun run examples/weblog/app.yaml` works out of the box.
	_ "github.com/flowrun/flowrun/examples/weblog/flowlets"
)

func main() { cli.Main() }
