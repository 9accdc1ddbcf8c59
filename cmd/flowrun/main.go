// Command flowrun runs flowrun apps: see specs/cli.md, or flowrun --help.
package main

import "github.com/flowrun/flowrun/runtime/cli"

func main() { cli.Main() }
