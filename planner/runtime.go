package planner

import (
	"fmt"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Runtime is the app file's optional `runtime:` section: settings of
// `flowrun run` kept with the app. A nil field is not set in the file (the
// command line's default applies); a flag given on the command line
// overrides the field. The planner checks the syntax; the runtime applies
// the values.
type Runtime struct {
	// HTTP: the HTTP server's listen address, "host:port" with an explicit
	// host (an empty host would listen on every interface), or "off".
	HTTP *Setting[string] `json:"http,omitempty"`
	// MemoryLimit: "auto", "off" or a size of at least MinMemoryLimit
	// (ParseMemoryLimit), as written.
	MemoryLimit *Setting[string] `json:"memory_limit,omitempty"`
	// MaxBacklog: the back-pressure bound of sources that do not set their
	// own (negative: none).
	MaxBacklog *Setting[int] `json:"max_backlog,omitempty"`
	// NoSync: commits are not fsynced.
	NoSync *Setting[bool] `json:"no_sync,omitempty"`
	// DeferCommits: steps commit deferred (visible to the next steps
	// before their sync; runtime.Options.DeferCommits).
	DeferCommits *Setting[bool] `json:"defer_commits,omitempty"`
	// StepTimeout: how long one step's transaction may run (ParseTimeout;
	// runtime.Options.StepTimeout), as written. A plugin's call is killed
	// after half of it.
	StepTimeout *Setting[string] `json:"step_timeout,omitempty"`
	// PluginStartTimeout: how long a plugin process may take to start and
	// hand-shake (ParseTimeout; runtime.Options.PluginStartTimeout), as
	// written.
	PluginStartTimeout *Setting[string] `json:"plugin_start_timeout,omitempty"`
}

// Setting is one value of the runtime section and where the file sets it,
// for error messages about the value in its context (a non-loopback
// address without a token, say).
type Setting[T any] struct {
	Value T        `json:"value"`
	Pos   Position `json:"pos"`
}

// IsZero reports whether the file sets nothing in the runtime section.
func (r Runtime) IsZero() bool {
	return r.HTTP == nil && r.MemoryLimit == nil && r.MaxBacklog == nil && r.NoSync == nil && r.DeferCommits == nil &&
		r.StepTimeout == nil && r.PluginStartTimeout == nil
}

// MaxTimeout is the longest step or plugin start timeout: the transaction
// coordinator's limit on a transaction's timeout (tx.Options.MaxTimeout's
// default).
const MaxTimeout = time.Hour

// ParseTimeout reads a step or plugin start timeout: a Go duration ("90s",
// "5m") from 1ms to MaxTimeout.
func ParseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration such as 90s or 5m", s)
	case d < time.Millisecond:
		return 0, fmt.Errorf("%q is below the minimum of 1ms", s)
	case d > MaxTimeout:
		return 0, fmt.Errorf("%q is above the maximum of 1h (a transaction's longest timeout)", s)
	}
	return d, nil
}

// MinMemoryLimit is the smallest memory limit: below it the garbage
// collector would run all the time.
const MinMemoryLimit = 32 << 20

// ParseMemoryLimit reads a memory limit: "auto" or "" (the runtime's
// default), "off" or "none" (no limit), each case-insensitive, or a size:
// bytes, or a number with a unit B, KiB, MiB, GiB, KB, MB or GB ("512MiB",
// "1.5GiB", "512 MiB"), at least MinMemoryLimit. keyword is "auto" or "off"
// for those; otherwise bytes is the size (math.MaxInt64 for sizes beyond).
func ParseMemoryLimit(s string) (bytes int64, keyword string, err error) {
	t := strings.TrimSpace(s)
	switch strings.ToLower(t) {
	case "", "auto":
		return 0, "auto", nil
	case "off", "none":
		return 0, "off", nil
	}
	n, ok := parseSize(t)
	if !ok {
		return 0, "", fmt.Errorf("memory limit %q: want auto, off, or a size such as 512MiB or 2GiB (a decimal number, then a unit)", s)
	}
	if n < MinMemoryLimit {
		return 0, "", fmt.Errorf("memory limit %q: below the minimum of 32MiB", s)
	}
	return n, "", nil
}

// ParseSize reads a size: bytes, or a number with a unit B, KiB, MiB, GiB,
// KB, MB or GB ("512MiB", "1.5GiB", "512 MiB"); math.MaxInt64 for sizes
// beyond.
func ParseSize(s string) (int64, error) {
	n, ok := parseSize(strings.TrimSpace(s))
	if !ok {
		return 0, fmt.Errorf("%q is not a size such as 512MiB or 2GiB (a decimal number, then a unit)", s)
	}
	return n, nil
}

// decimalRE is a size's number: decimal digits, a fraction, an exponent.
var decimalRE = regexp.MustCompile(`^\+?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

func parseSize(t string) (int64, bool) {
	i := strings.LastIndexAny(t, "0123456789") // the number ends there, the unit follows
	num, unit := t[:i+1], strings.TrimSpace(t[i+1:])
	mult := map[string]float64{"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 1e3, "mb": 1e6, "gb": 1e9}[strings.ToLower(unit)]
	if !decimalRE.MatchString(num) {
		return 0, false // ParseFloat also reads hex floats (0x1p30), 1_000, Inf
	}
	f, perr := strconv.ParseFloat(num, 64)
	if mult == 0 || perr != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	if n := f * mult; n < math.MaxInt64 {
		return int64(n), true
	}
	return math.MaxInt64, true
}

// CheckListenAddr checks an HTTP listen address of the runtime section:
// "off", or host:port with a port in 0..65535 (0: any free port) and an
// explicit host. The host is what the operator means to expose:
// 127.0.0.1 or localhost keeps the server on this machine, 0.0.0.0 or [::]
// opens it to the network, which has to be written out: ":8080" (every
// interface, implicitly) is refused.
func CheckListenAddr(addr string) error {
	if addr == "off" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port (127.0.0.1:8080) or off, got %q", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q of %q is not a number in 0..65535 (0: a free port)", port, addr)
	}
	if host == "" {
		return fmt.Errorf("%q has no host, which listens on every interface: write 127.0.0.1%s to stay on this machine, or 0.0.0.0%s (or [::]%s) to listen on every interface explicitly", addr, addr, addr, addr)
	}
	return nil
}

// runtimeSpec is the decoded runtime section.
type runtimeSpec struct {
	http, memoryLimit               field[string]
	maxBacklog                      field[int]
	noSync, deferCommits            field[bool]
	stepTimeout, pluginStartTimeout field[string]
}

var runtimeFields = []string{"http", "memory_limit", "max_backlog", "no_sync", "defer_commits", "step_timeout", "plugin_start_timeout"}

func (d *decoder) decodeRuntime(v *yaml.Node) *runtimeSpec {
	r := &runtimeSpec{}
	if !d.mapping(v, "runtime") {
		return r
	}
	d.eachPair(v, "in runtime", runtimeFields, func(key string, _, v *yaml.Node) {
		switch key {
		case "http":
			r.http = d.str(v, "runtime.http")
		case "memory_limit":
			r.memoryLimit = d.str(v, "runtime.memory_limit")
		case "max_backlog":
			r.maxBacklog = d.integer(v, "runtime.max_backlog")
		case "no_sync":
			r.noSync = d.boolean(v, "runtime.no_sync")
		case "defer_commits":
			r.deferCommits = d.boolean(v, "runtime.defer_commits")
		case "step_timeout":
			r.stepTimeout = d.str(v, "runtime.step_timeout")
		case "plugin_start_timeout":
			r.pluginStartTimeout = d.str(v, "runtime.plugin_start_timeout")
		}
	})
	return r
}

func (d *decoder) boolean(n *yaml.Node, what string) field[bool] {
	return parseField(d, n, what, func(text string) (bool, error) {
		switch strings.TrimSpace(text) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return false, strconv.ErrSyntax
	}, "true or false")
}

func (v *validator) checkRuntime(r *runtimeSpec) {
	if r == nil {
		return
	}
	if r.http.set {
		if err := CheckListenAddr(r.http.val); err != nil {
			v.errs.add(r.http.pos, "runtime.http: %v", err)
		}
	}
	if r.memoryLimit.set {
		if _, _, err := ParseMemoryLimit(r.memoryLimit.val); err != nil {
			v.errs.add(r.memoryLimit.pos, "runtime.memory_limit: %v", err)
		}
	}
	for _, t := range []struct {
		f    field[string]
		name string
	}{{r.stepTimeout, "step_timeout"}, {r.pluginStartTimeout, "plugin_start_timeout"}} {
		if t.f.set {
			if _, err := ParseTimeout(t.f.val); err != nil {
				v.errs.add(t.f.pos, "runtime.%s: %v", t.name, err)
			}
		}
	}
}

func (r *runtimeSpec) plan() Runtime {
	var out Runtime
	if r == nil {
		return out
	}
	if r.http.set {
		out.HTTP = &Setting[string]{r.http.val, r.http.pos}
	}
	if r.memoryLimit.set {
		out.MemoryLimit = &Setting[string]{r.memoryLimit.val, r.memoryLimit.pos}
	}
	if r.maxBacklog.set {
		out.MaxBacklog = &Setting[int]{r.maxBacklog.val, r.maxBacklog.pos}
	}
	if r.noSync.set {
		out.NoSync = &Setting[bool]{r.noSync.val, r.noSync.pos}
	}
	if r.deferCommits.set {
		out.DeferCommits = &Setting[bool]{r.deferCommits.val, r.deferCommits.pos}
	}
	if r.stepTimeout.set {
		out.StepTimeout = &Setting[string]{r.stepTimeout.val, r.stepTimeout.pos}
	}
	if r.pluginStartTimeout.set {
		out.PluginStartTimeout = &Setting[string]{r.pluginStartTimeout.val, r.pluginStartTimeout.pos}
	}
	return out
}
