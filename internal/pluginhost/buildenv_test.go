package pluginhost_test

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/internal/pluginhost"
)

// TestBuildWithoutHome: with neither HOME nor GOPATH, GOMODCACHE, GOCACHE
// or XDG_CACHE_HOME set (a service under systemd), a package directory
// still builds: the go commands get GOPATH and GOCACHE under the plugin
// cache, which is logged once. The package needs a module from the module
// cache (served by a file proxy here: the test needs no network) and
// compiles against a fresh build cache (the standard library: seconds).
func TestBuildWithoutHome(t *testing.T) {
	tmp := t.TempDir()
	// A module proxy holding example.com/dep v1.0.0.
	proxy := filepath.Join(tmp, "proxy")
	at := filepath.Join(proxy, "example.com", "dep", "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(at, "list"), "v1.0.0\n")
	write(filepath.Join(at, "v1.0.0.info"), `{"Version":"v1.0.0","Time":"2024-01-01T00:00:00Z"}`)
	write(filepath.Join(at, "v1.0.0.mod"), "module example.com/dep\n\ngo 1.21\n")
	zf, err := os.Create(filepath.Join(at, "v1.0.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	files := map[string]string{
		"dep.go": "package dep\n\nfunc Hello() string { return \"hello\" }\n",
		"go.mod": "module example.com/dep\n\ngo 1.21\n",
	}
	for _, name := range []string{"dep.go", "go.mod"} {
		w, err := zw.Create("example.com/dep@v1.0.0/" + name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(files[name]))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	zf.Close()
	// go.sum's lines (golang.org/x/mod/sumdb/dirhash's Hash1: the SHA-256
	// of the sorted "<sha256 hex>  <name>" lines of the files).
	hash1 := func(names ...string) string {
		h := sha256.New()
		for _, n := range names {
			fmt.Fprintf(h, "%x  %s\n", sha256.Sum256([]byte(files[filepath.Base(n)])), n)
		}
		return "h1:" + base64.StdEncoding.EncodeToString(h.Sum(nil))
	}
	sum := "example.com/dep v1.0.0 " + hash1("example.com/dep@v1.0.0/dep.go", "example.com/dep@v1.0.0/go.mod") + "\n" +
		"example.com/dep v1.0.0/go.mod " + hash1("go.mod") + "\n"

	// The plugin (any main package: Build does not run it).
	dir := filepath.Join(tmp, "homeless")
	os.Mkdir(dir, 0o755)
	write(filepath.Join(dir, "go.mod"), "module example.com/homeless\n\ngo 1.21\n\nrequire example.com/dep v1.0.0\n")
	write(filepath.Join(dir, "go.sum"), sum)
	write(filepath.Join(dir, "main.go"), "package main\n\nimport \"example.com/dep\"\n\nfunc main() { println(dep.Hello()) }\n")

	for _, k := range []string{"HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "GOPATH", "GOMODCACHE", "GOCACHE", "GOENV"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("GOPROXY", "file://"+filepath.ToSlash(proxy))
	t.Setenv("GOSUMDB", "off")
	t.Setenv("GOTOOLCHAIN", "local")
	t.Setenv("GOFLAGS", "-modcacherw") // so that the test's cleanup can remove the module cache

	logs := &logBuf{}
	cache := filepath.Join(tmp, "cache")
	o := pluginhost.Options{CacheDir: cache, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	var bins []string
	for range 2 { // a build, then a cache hit
		bin, err := pluginhost.Build(context.Background(), "homeless", dir, o)
		if err != nil {
			t.Fatal(err)
		}
		bins = append(bins, bin)
	}
	if bins[0] != bins[1] || !strings.HasPrefix(bins[0], cache+string(filepath.Separator)) {
		t.Errorf("binaries %v", bins)
	}
	if _, err := os.Stat(filepath.Join(cache, "go", "path", "pkg", "mod", "example.com", "dep@v1.0.0")); err != nil {
		t.Errorf("module cache: %v", err)
	}
	if n := strings.Count(logs.String(), "GOPATH="+filepath.Join(cache, "go", "path")); n != 1 {
		t.Errorf("want one Info line naming GOPATH, got %d:\n%s", n, logs)
	}
	t.Log(logs)
}
