package pluginhost

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildError is a plugin package directory that did not build. Output is the
// go command's message (the compiler's errors).
type BuildError struct {
	Flowlet string
	Dir     string
	Output  string
	Err     error
	// Hint says what to do about a known cause (a plugin outside any
	// module, or one whose go.mod lacks flowrun).
	Hint string
}

func (e *BuildError) Error() string {
	out := strings.TrimSpace(e.Output)
	if out == "" {
		out = e.Err.Error()
	}
	if e.Hint != "" {
		out += "\n" + e.Hint
	}
	return fmt.Sprintf("flowlet %q: building plugin %s failed:\n%s", e.Flowlet, e.Dir, out)
}

// sdkModule is the module of the plugin SDK (package flowlet/plugin).
const sdkModule = "github.com/flowrun/flowrun"

// errNoModule is a plugin directory in no module: Go's own message
// ("go.mod file not found") does not say what a plugin needs.
var errNoModule = errors.New("no go.mod in the plugin's directory or a parent directory")

// buildHint says how to set up a plugin's module when out (the go
// command's output) or err shows that it is missing or lacks the SDK.
func buildHint(dir, out string, err error) string {
	fix := fmt.Sprintf("  go mod edit -require=%s@v0.0.0 -replace=%s=<path of a flowrun checkout>\n  go mod tidy", sdkModule, sdkModule)
	switch {
	case errors.Is(err, errNoModule):
		name := filepath.Base(dir)
		return fmt.Sprintf("a plugin package needs a Go module that requires flowrun; in %s run:\n  go mod init example.com/%s\n%s\n(specs/plugins.md, \"A plugin outside the repository\")", dir, name, fix)
	case strings.Contains(out, "no required module provides package "+sdkModule+"/"):
		return fmt.Sprintf("the plugin's go.mod does not require flowrun; in %s run:\n%s\n(specs/plugins.md, \"A plugin outside the repository\")", dir, fix)
	}
	return ""
}

func (e *BuildError) Unwrap() error { return e.Err }

// Resolve returns the plugin path of a flowlet as the runtime must use it: a
// relative path is relative to the directory of the app file (appDir).
func Resolve(path, appDir string) string {
	if filepath.IsAbs(path) {
		return filepath.Clean(path)
	}
	full := filepath.Join(appDir, path)
	// Absolute, so that exec never searches PATH for a bare name
	// ("plugin: x.py" next to an app file given as "app.yaml").
	if abs, err := filepath.Abs(full); err == nil {
		return abs
	}
	return full
}

// Build builds the Go main package in dir into the cache and returns the
// binary's path. The cache is keyed by a hash of everything the binary is
// made of: the files of every package it imports from outside the module
// cache (the plugin's own, and the rest of its module's), the versions of
// the modules it imports from the module cache, go.mod and go.sum, the Go
// version, GOOS, GOARCH, CGO_ENABLED, GOFLAGS and flags. A hit costs a `go
// list` and a `go env`; a miss runs `go build`.
func Build(ctx context.Context, flowletName, dir string, opts Options) (string, error) {
	opts.defaults()
	log := opts.Logger.With("flowlet", flowletName, "dir", dir)
	began := time.Now()
	berr := func(out string, err error) error {
		if ctx.Err() != nil {
			out, err = "", fmt.Errorf("build interrupted: %w", ctx.Err())
		}
		return &BuildError{Flowlet: flowletName, Dir: dir, Output: out, Err: err, Hint: buildHint(dir, out, err)}
	}
	goBin, err := exec.LookPath(opts.GoCommand)
	if err != nil {
		return "", berr("", fmt.Errorf("the go command is needed to build a plugin given as a package directory (or give the path of a built binary): %w", err))
	}
	env := goEnv(opts.CacheDir, opts.Logger)
	key, out, err := sourceKey(ctx, goBin, dir, env, opts.BuildFlags)
	if err != nil {
		return "", berr(out, err)
	}
	name := filepath.Base(dir)
	if name == "." || name == string(filepath.Separator) {
		name = "plugin"
	}
	binDir := filepath.Join(opts.CacheDir, key[:32])
	bin := filepath.Join(binDir, name)
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() {
		markUsed(bin, time.Now())
		trimCache(opts.CacheDir, binDir, opts.CacheMaxAge, time.Now(), opts.Logger)
		log.Debug("plugin build cache hit", "binary", bin, "cached", true, "duration", time.Since(began).Round(time.Millisecond))
		return bin, nil
	}
	// A cold build (Go's own cache empty) takes tens of seconds: say so.
	log.Info("building plugin", "cache", opts.CacheDir)
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", berr("", err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(binDir, "."+name+".tmp-"+hex.EncodeToString(rnd[:]))
	args := append([]string{"build", "-o", tmp}, opts.BuildFlags...)
	args = append(args, ".")
	cmd := goCmd(ctx, goBin, dir, env, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		err = berr(buf.String(), err)
		log.Info("plugin build failed", "cached", false, "duration", time.Since(began).Round(time.Millisecond))
		return "", err
	}
	if err := os.Rename(tmp, bin); err != nil {
		os.Remove(tmp)
		return "", berr("", err)
	}
	log.Info("plugin built", "binary", bin, "cached", false, "duration", time.Since(began).Round(time.Millisecond))
	trimCache(opts.CacheDir, binDir, opts.CacheMaxAge, time.Now(), opts.Logger)
	return bin, nil
}

// goCmd is a go command that stops with ctx, children included: go build
// runs the compilers and the linker as processes of their own, which would
// run on (and hold the output pipe, so Wait) after the go command alone
// was killed. It gets a process group, killed as a whole. env is its
// environment (nil: the host's).
func goCmd(ctx context.Context, goBin, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	// Should something outside the group hold the pipe, Wait returns anyway.
	cmd.WaitDelay = time.Second
	return cmd
}

// goEnvLogged holds the plugin caches whose go commands' own caches were
// logged (goEnv).
var goEnvLogged sync.Map

// goEnv is the environment of the go commands Build runs: nil (the host's)
// unless the host's gives them no module cache or no build cache — HOME is
// unset (a service under systemd) and so are GOPATH and GOMODCACHE, resp.
// GOCACHE and XDG_CACHE_HOME. Then GOPATH (<cache>/go/path, so the module
// cache is <cache>/go/path/pkg/mod), resp. GOCACHE (<cache>/go/build), is
// set under the plugin cache, and that is logged at Info once per cache
// directory. A fresh module cache means go downloads the plugin's modules
// (GOPROXY) at its first build.
func goEnv(cacheDir string, log *slog.Logger) []string {
	if os.Getenv("HOME") != "" {
		return nil
	}
	base, err := filepath.Abs(filepath.Join(cacheDir, "go")) // the go command wants them absolute
	if err != nil {
		return nil
	}
	var add []string
	var attrs []any
	if os.Getenv("GOPATH") == "" && os.Getenv("GOMODCACHE") == "" {
		add = append(add, "GOPATH="+filepath.Join(base, "path"))
		attrs = append(attrs, "GOPATH", filepath.Join(base, "path"))
	}
	if os.Getenv("GOCACHE") == "" && os.Getenv("XDG_CACHE_HOME") == "" {
		add = append(add, "GOCACHE="+filepath.Join(base, "build"))
		attrs = append(attrs, "GOCACHE", filepath.Join(base, "build"))
	}
	if len(add) == 0 {
		return nil
	}
	if _, logged := goEnvLogged.LoadOrStore(base, true); !logged {
		log.Info("HOME is not set: plugin builds use a module cache and a build cache in the plugin cache", attrs...)
	}
	return append(os.Environ(), add...)
}

type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	Module     *struct {
		Path, Version, GoMod string
		Main                 bool
		Replace              *struct{ Path, Version string }
	}
	GoFiles, CgoFiles, CFiles, CXXFiles, HFiles, SFiles, SysoFiles, EmbedFiles []string
	Error                                                                      *struct{ Err string }
}

// sourceKey hashes what the binary built from dir is made of.
func sourceKey(ctx context.Context, goBin, dir string, env, flags []string) (key, out string, err error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return "", "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "flowrun plugin build v1\nflags %q\n", flags)
	envOut, err := runGo(ctx, goBin, dir, env, "env", "GOVERSION", "GOOS", "GOARCH", "CGO_ENABLED", "GOFLAGS", "GOEXPERIMENT", "GOMOD")
	if err != nil {
		return "", envOut, err
	}
	fmt.Fprintf(h, "env %s\n", envOut)
	lines := strings.Split(strings.TrimSpace(envOut), "\n")
	gomod := strings.TrimSpace(lines[len(lines)-1])
	if gomod == os.DevNull { // module mode, no go.mod
		return "", "", errNoModule
	}
	if gomod != "" {
		for _, f := range []string{gomod, strings.TrimSuffix(gomod, ".mod") + ".sum"} {
			if err := hashFile(h, f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return "", "", err
			}
		}
	}
	listOut, err := runGo(ctx, goBin, dir, env, "list", "-e", "-deps",
		"-json=ImportPath,Dir,Standard,Module,GoFiles,CgoFiles,CFiles,CXXFiles,HFiles,SFiles,SysoFiles,EmbedFiles,Error", ".")
	if err != nil {
		return "", listOut, err
	}
	dec := json.NewDecoder(strings.NewReader(listOut))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return "", "", fmt.Errorf("go list: %w", err)
		}
		if p.Standard {
			continue
		}
		fmt.Fprintf(h, "pkg %s\n", p.ImportPath)
		if p.Error != nil {
			fmt.Fprintf(h, "error %s\n", p.Error.Err)
		}
		if m := p.Module; m != nil && !m.Main && m.Version != "" && (m.Replace == nil || m.Replace.Version != "") {
			fmt.Fprintf(h, "module %s@%s", m.Path, m.Version)
			if m.Replace != nil {
				fmt.Fprintf(h, " => %s@%s", m.Replace.Path, m.Replace.Version)
			}
			h.Write([]byte{'\n'})
			continue
		}
		var files []string
		for _, l := range [][]string{p.GoFiles, p.CgoFiles, p.CFiles, p.CXXFiles, p.HFiles, p.SFiles, p.SysoFiles, p.EmbedFiles} {
			files = append(files, l...)
		}
		sort.Strings(files)
		for _, f := range files {
			fmt.Fprintf(h, "file %s\n", f)
			if err := hashFile(h, filepath.Join(p.Dir, f)); err != nil {
				return "", "", err
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)), "", nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	fmt.Fprintf(h, "%d\n", st.Size())
	_, err = io.Copy(h, f)
	return err
}

func runGo(ctx context.Context, goBin, dir string, env []string, args ...string) (string, error) {
	cmd := goCmd(ctx, goBin, dir, env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return errb.String() + out.String(), fmt.Errorf("go %s: %w", args[0], err)
	}
	return out.String(), nil
}
