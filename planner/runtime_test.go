package planner

import (
	"math"
	"strings"
	"testing"
	"time"
)

// The runtime section's values reach the plan with the positions of the
// values; a file without one has a zero Runtime.
func TestRuntimeSection(t *testing.T) {
	p, err := Parse("app.yaml", []byte(`app: x
runtime:
  http: "0.0.0.0:9000"
  memory_limit: off
  max_backlog: -1
  no_sync: false
  defer_commits: true
  step_timeout: 90s
  plugin_start_timeout: 2m
flowlets: {a: {type: http_source}}
`), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	r := p.Runtime
	if r.HTTP == nil || r.HTTP.Value != "0.0.0.0:9000" || r.HTTP.Pos != (Position{File: "app.yaml", Line: 3, Col: 9}) {
		t.Errorf("http: %+v", r.HTTP)
	}
	if r.MemoryLimit == nil || r.MemoryLimit.Value != "off" || r.MemoryLimit.Pos.Line != 4 {
		t.Errorf("memory_limit: %+v", r.MemoryLimit)
	}
	if r.MaxBacklog == nil || r.MaxBacklog.Value != -1 || r.MaxBacklog.Pos.Line != 5 {
		t.Errorf("max_backlog: %+v", r.MaxBacklog)
	}
	if r.NoSync == nil || r.NoSync.Value || r.NoSync.Pos.Line != 6 {
		t.Errorf("no_sync: %+v (set to false is not unset)", r.NoSync)
	}
	if r.DeferCommits == nil || !r.DeferCommits.Value || r.DeferCommits.Pos.Line != 7 {
		t.Errorf("defer_commits: %+v", r.DeferCommits)
	}
	if r.StepTimeout == nil || r.StepTimeout.Value != "90s" || r.StepTimeout.Pos.Line != 8 {
		t.Errorf("step_timeout: %+v", r.StepTimeout)
	}
	if r.PluginStartTimeout == nil || r.PluginStartTimeout.Value != "2m" || r.PluginStartTimeout.Pos.Line != 9 {
		t.Errorf("plugin_start_timeout: %+v", r.PluginStartTimeout)
	}
	if !strings.Contains(p.Text(), "step_timeout  90s") || !strings.Contains(p.Text(), "plugin_start_timeout 2m") {
		t.Errorf("text has no timeout lines:\n%s", p.Text())
	}
	if !strings.Contains(p.Text(), "defer_commits true") {
		t.Errorf("text has no defer_commits line:\n%s", p.Text())
	}
	if r.IsZero() {
		t.Error("IsZero with every field set")
	}

	for _, src := range []string{"app: x\nflowlets: {a: {type: http_source}}\n", "app: x\nruntime:\nflowlets: {a: {type: http_source}}\n",
		"app: x\nruntime: {http: ~}\nflowlets: {a: {type: http_source}}\n"} {
		p, err := Parse("app.yaml", []byte(src), testOptions())
		if err != nil {
			t.Fatal(err)
		}
		if !p.Runtime.IsZero() || strings.Contains(p.Text(), "runtime") {
			t.Errorf("%q: runtime %+v, text:\n%s", src, p.Runtime, p.Text())
		}
	}
}

func TestCheckListenAddr(t *testing.T) {
	for _, ok := range []string{"off", "127.0.0.1:8080", "localhost:0", "[::1]:9000", "0.0.0.0:80", "[::]:8080", "example.org:443"} {
		if err := CheckListenAddr(ok); err != nil {
			t.Errorf("CheckListenAddr(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", ":8080", "[]:8080", "localhost", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:-1", "OFF", "1.2.3.4:80:90"} {
		if err := CheckListenAddr(bad); err == nil {
			t.Errorf("CheckListenAddr(%q) accepted", bad)
		}
	}
}

func TestParseMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		in      string
		bytes   int64
		keyword string
	}{
		{"auto", 0, "auto"}, {"", 0, "auto"}, {" Auto ", 0, "auto"}, {"off", 0, "off"}, {"NONE", 0, "off"},
		{"512MiB", 512 << 20, ""}, {"512 MiB", 512 << 20, ""}, {"1.5GiB", 3 << 29, ""}, {"2gb", 2e9, ""},
		{"67108864", 64 << 20, ""}, {"32MiB", 32 << 20, ""}, {"1e30GB", math.MaxInt64, ""},
	} {
		n, kw, err := ParseMemoryLimit(c.in)
		if err != nil || n != c.bytes || kw != c.keyword {
			t.Errorf("ParseMemoryLimit(%q) = %d, %q, %v; want %d, %q", c.in, n, kw, err, c.bytes, c.keyword)
		}
	}
	for _, bad := range []string{"lots", "MiB", "12 parsecs", "-1GiB", "1MiB", "0", "NaN", "1e999GiB", "1..5GiB", "31MiB",
		"0x1p30", "0X1P30", "0x1p10MiB", "0x_1p30", "0x40000000", "1_073_741_824", "Infinity"} {
		if n, kw, err := ParseMemoryLimit(bad); err == nil {
			t.Errorf("ParseMemoryLimit(%q) = %d, %q; want an error", bad, n, kw)
		}
	}
	// Hex floats were taken (strconv.ParseFloat reads them): 0x1p30 was
	// 1GiB. The error says what a size is.
	if _, err := ParseSize("0x1p30"); err == nil || !strings.Contains(err.Error(), "decimal") {
		t.Errorf("ParseSize(0x1p30): %v, want an error asking for a decimal number", err)
	}
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"1ms": time.Millisecond, "90s": 90 * time.Second, " 5m ": 5 * time.Minute, "1h": time.Hour} {
		if d, err := ParseTimeout(in); err != nil || d != want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", in, d, err, want)
		}
	}
	for in, msg := range map[string]string{"0s": "below the minimum of 1ms", "-1s": "below", "999us": "below", "61m": "above the maximum of 1h",
		"ten seconds": "not a duration", "30": "not a duration", "": "not a duration"} {
		if d, err := ParseTimeout(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseTimeout(%q) = %v, %v; want an error saying %q", in, d, err, msg)
		}
	}
}

// A bad timeout in the runtime section is an error at its position.
func TestRuntimeTimeoutErrors(t *testing.T) {
	_, err := Parse("app.yaml", []byte("app: x\nruntime:\n  step_timeout: 0s\n  plugin_start_timeout: 2h\nflowlets: {a: {type: http_source}}\n"), testOptions())
	for _, want := range []string{`app.yaml:3:17: runtime.step_timeout: "0s" is below the minimum of 1ms`,
		`app.yaml:4:25: runtime.plugin_start_timeout: "2h" is above the maximum of 1h`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to contain %q", err, want)
		}
	}
}
