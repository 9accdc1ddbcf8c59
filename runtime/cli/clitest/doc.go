// Package clitest runs the flowrun CLI in-process for tests of packages that
// build on it (the runtime's own tests, example plugins): no binary to build,
// and the exit code, stdout and stderr come back as values.
//
//	code, out, errOut := clitest.Run(t, dir, "run", "--drain", "app.yaml")
//	clitest.ExpectLines(t, filepath.Join(dir, "out.txt"), 1000, func(i int) string { ... })
//
// Run changes the test's working directory (t.Chdir), so such tests cannot
// be parallel.
package clitest
