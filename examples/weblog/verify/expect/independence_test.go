package expect

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotImportedByPipeline guards the independence of the verifier: no
// pipeline code may import this package — if the pipeline shared this code, a
// bug in it would go unnoticed. Tests (_test.go files) may: comparing a
// pipeline's results with the verifier is what the verifier is for.
func TestNotImportedByPipeline(t *testing.T) {
	root, err := filepath.Abs("../../../..") // module root
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Skipf("module root not found: %v", err)
	}
	const importPath = `"github.com/flowrun/flowrun/examples/weblog/verify/expect"`
	allowed := []string{
		filepath.Join(root, "examples", "weblog", "verify") + string(filepath.Separator),
		filepath.Join(root, "examples", "weblog", "gen") + string(filepath.Separator),
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable or vanished (others are working concurrently): ignore
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" ||
				path == filepath.Join(root, "data")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, a := range allowed {
			if strings.HasPrefix(path, a) {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		if strings.Contains(string(b), importPath) {
			t.Errorf("%s imports the verifier's package; the pipeline must implement the README rules independently", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
