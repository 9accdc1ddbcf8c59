package httpapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/runtime/httpapi"
)

// A damaged address file is an error that names it.
func TestReadAddrFileDamaged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, httpapi.AddrFile)
	if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := httpapi.ReadAddrFile(dir)
	if err == nil || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), "--addr") {
		t.Fatalf("damaged %s: %v", httpapi.AddrFile, err)
	}
}
