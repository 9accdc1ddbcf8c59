package runtime_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/flowrun/flowrun/runtime/cli"
)

// The test binary doubles as the flowrun CLI (with the test flowlet types):
// crash tests re-execute it with FLOWRUN_CLI_ARGS set and kill it.
func TestMain(m *testing.M) {
	if args := os.Getenv("FLOWRUN_CLI_ARGS"); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			panic(err)
		}
		os.Exit(cli.Run(a, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}
