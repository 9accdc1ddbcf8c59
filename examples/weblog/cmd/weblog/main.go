package main

import (
	_ "github.com/flowrun/flowrun/examples/weblog/flowlets"
	"github.com/flowrun/flowrun/runtime/cli"
)

func main() { cli.Main() }
