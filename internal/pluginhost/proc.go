package pluginhost

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/status"

	"github.com/flowrun/flowrun/flowlet/plugin"
	"github.com/flowrun/flowrun/flowlet/plugin/channel"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// proc is one running plugin process.
type proc struct {
	gp     *goplugin.Client
	client pb.FlowletClient
	broker *goplugin.GRPCBroker
	pid    int // also its process group's id
	cancel context.CancelFunc
	logs   *logWriter
	hostID uint32 // broker id of the Host service, once served
	host   *hostServer
	once   sync.Once

	// The Steps stream (opened at the first step, under smu; noSteps: the
	// plugin does not implement it, use the unary calls).
	smu         sync.Mutex
	steps       pb.Flowlet_StepsClient
	stepsCancel context.CancelFunc
	stepsDone   bool
	noSteps     bool

	// The step channel (package channel), opened after Init when the
	// plugin implements OpenChannel; nil otherwise. resp is its reused
	// response, decoded by dec.
	ch   *channel.Conn
	resp pb.StepResponse
	dec  pb.ResponseDecoder
}

// openChannel opens the process's step channel: it sends a fresh
// certificate with OpenChannel over the AutoMTLS connection, dials the
// socket the plugin answers with, runs a TLS handshake that accepts
// exactly the plugin's certificate and waits for the plugin's
// acknowledgement (it accepted the host's). A plugin without OpenChannel
// (codes.Unimplemented) keeps pr.ch nil and gets Steps or unary calls.
func (pr *proc) openChannel(ctx context.Context) error {
	cert, err := channel.NewCert()
	if err != nil {
		return err
	}
	r, err := pr.client.OpenChannel(ctx, &pb.ChannelRequest{HostCert: cert.Certificate[0]})
	if status.Code(err) == codes.Unimplemented {
		return nil
	}
	if err != nil {
		return err
	}
	if r.Network != "unix" {
		return fmt.Errorf("step channel: network %q (only unix is supported)", r.Network)
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, r.Network, r.Address)
	if err != nil {
		return fmt.Errorf("step channel: %w", err)
	}
	// Open waits for the plugin's acknowledgement after the handshake: in
	// TLS 1.3 the host's handshake completes before the plugin has checked
	// the host's certificate, and a refusal must show here (the caller
	// falls back to Steps), not at the first step.
	c := channel.Client(raw, channel.Config(cert, r.PluginCert))
	if err := c.Open(ctx); err != nil {
		raw.Close()
		return fmt.Errorf("step channel: %w", err)
	}
	pr.smu.Lock()
	pr.ch = c
	pr.smu.Unlock()
	return nil
}

// openSteps returns the process's Steps stream, opening it if needed.
func (pr *proc) openSteps() (pb.Flowlet_StepsClient, error) {
	pr.smu.Lock()
	defer pr.smu.Unlock()
	if pr.stepsDone {
		return nil, errors.New("the step stream was closed")
	}
	if pr.steps == nil {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := pr.client.Steps(ctx)
		if err != nil {
			cancel()
			return nil, err
		}
		pr.steps, pr.stepsCancel = st, cancel
	}
	return pr.steps, nil
}

// dropSteps ends the Steps stream st, if it is still the process's, so
// that the next step opens a new one (a step on st in flight fails).
func (pr *proc) dropSteps(st pb.Flowlet_StepsClient) {
	pr.smu.Lock()
	defer pr.smu.Unlock()
	if pr.steps == st && st != nil {
		pr.stepsCancel()
		pr.steps, pr.stepsCancel = nil, nil
	}
}

// closeSteps ends the Steps stream (a step in flight fails); a closed
// stream is not reopened.
func (pr *proc) closeSteps() {
	pr.smu.Lock()
	defer pr.smu.Unlock()
	pr.stepsDone = true
	if pr.stepsCancel != nil {
		pr.stepsCancel()
	}
	if pr.ch != nil {
		pr.ch.Close()
	}
}

// hostPlugin is the host side of the go-plugin plugin.
type hostPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

type dispensed struct {
	client pb.FlowletClient
	broker *goplugin.GRPCBroker
}

func (hostPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error {
	return errors.New("pluginhost: the host serves no plugin")
}

func (hostPlugin) GRPCClient(_ context.Context, b *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &dispensed{client: pb.NewFlowletClient(c), broker: b}, nil
}

// start starts a process of the plugin for instance idx (for log tags).
// ctx bounds the start and handshake only, not the process's life.
func (p *Plugin) start(ctx context.Context, idx int) (*proc, error) {
	lw := newLogWriter(p.logger(idx))
	// The process gets a group of its own, killed as a whole: a child of the
	// plugin (a shell script's command, say) holds its stdout, and go-plugin
	// waits for that pipe to close, also after a failed handshake. pctx
	// exists only to kill the group while the handshake runs (cmd.Cancel,
	// called by exec with cmd.Process set).
	pctx, pcancel := context.WithCancel(context.Background())
	if p.built {
		markUsed(p.exe, time.Now()) // the link and the entry are one file
	}
	cmd := exec.CommandContext(pctx, p.exe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	gp := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: plugin.Handshake,
		Plugins:         goplugin.PluginSet{plugin.Name: hostPlugin{}},
		// A RunnerFunc instead of Cmd: go-plugin then makes a directory
		// for the process's sockets in UnixSocketConfig.TempDir (the
		// plugin's socket directory, short enough for socket paths:
		// sockdir.go), gives it to the plugin as PLUGIN_UNIX_SOCKET_DIR,
		// puts the host's broker sockets there too (not in $TMPDIR, which
		// may be too long, and where a host killed with kill -9 left
		// them), and removes it when the process ends.
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, _ string) (runner.Runner, error) {
			// spec holds go-plugin's environment only (SkipHostEnv): it
			// goes last, so that neither the host's nor Options.Env
			// overrides the handshake's variables.
			cmd.Env = append(append(os.Environ(), p.opts.Env...), plugin.HostPIDEnv+"="+strconv.Itoa(os.Getpid()))
			cmd.Env = append(cmd.Env, spec.Env...)
			cmd.Stdin = spec.Stdin
			return newCmdRunner(cmd)
		},
		SkipHostEnv:      true,
		UnixSocketConfig: &goplugin.UnixSocketConfig{TempDir: p.sockDir},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     p.opts.StartTimeout,
		Stderr:           lw,
		SyncStderr:       lw.sync(),
		SyncStdout:       lw.sync(),
		Logger:           hclog.New(&hclog.LoggerOptions{Level: hclog.Off, Output: lw}),
		GRPCDialOptions: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(plugin.MaxMessageSize), grpc.MaxCallSendMsgSize(plugin.MaxMessageSize)),
			grpc.WithInitialWindowSize(plugin.WindowSize), grpc.WithInitialConnWindowSize(plugin.WindowSize),
			experimental.WithBufferPool(plugin.BufferPool),
			grpc.WithWriteBufferSize(plugin.IOBufferSize), grpc.WithReadBufferSize(plugin.IOBufferSize),
		},
	})
	fail := func(err error) (*proc, error) {
		// cmd.Process was set (or not) by gp.Client, on this goroutine.
		if cmd.Process != nil {
			_ = killGroup(cmd.Process.Pid)
		}
		gp.Kill()
		pcancel()
		return nil, err
	}
	stopWatch := context.AfterFunc(ctx, pcancel)
	rpc, err := gp.Client()
	if !stopWatch() {
		return fail(&StartError{Flowlet: p.flowlet, Path: p.path, Err: fmt.Errorf("start interrupted: %w", ctx.Err())})
	}
	if err != nil {
		return fail(p.handshakeError(err, lw))
	}
	raw, err := rpc.Dispense(plugin.Name)
	if err != nil {
		return fail(&StartError{Flowlet: p.flowlet, Path: p.path, Err: err})
	}
	d := raw.(*dispensed)
	return &proc{gp: gp, client: d.client, broker: d.broker, pid: cmd.Process.Pid, cancel: pcancel, logs: lw}, nil
}

// cmdRunner runs a plugin's command for go-plugin, as go-plugin's own
// (internal) runner does.
type cmdRunner struct {
	cmd            *exec.Cmd
	stdout, stderr io.ReadCloser
	pid            atomic.Int64
}

func newCmdRunner(cmd *exec.Cmd) (*cmdRunner, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	return &cmdRunner{cmd: cmd, stdout: stdout, stderr: stderr}, nil
}

func (r *cmdRunner) Start(context.Context) error {
	if err := r.cmd.Start(); err != nil {
		return err
	}
	r.pid.Store(int64(r.cmd.Process.Pid))
	return nil
}

func (r *cmdRunner) Wait(context.Context) error { return r.cmd.Wait() }

func (r *cmdRunner) Kill(context.Context) error {
	if pid := r.pid.Load(); pid > 0 {
		if err := r.cmd.Process.Kill(); !errors.Is(err, os.ErrProcessDone) {
			return err
		}
	}
	return nil
}

func (r *cmdRunner) Stdout() io.ReadCloser { return r.stdout }
func (r *cmdRunner) Stderr() io.ReadCloser { return r.stderr }
func (r *cmdRunner) Name() string          { return r.cmd.Path }

func (r *cmdRunner) ID() string {
	if pid := r.pid.Load(); pid > 0 {
		return strconv.FormatInt(pid, 10)
	}
	return ""
}

// Diagnose adds nothing to a handshake's failure: handshakeError says
// what it was.
func (r *cmdRunner) Diagnose(context.Context) string { return "" }

func (r *cmdRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (r *cmdRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// killGroup kills the process group led by pid (SIGKILL).
func killGroup(pid int) error { return syscall.Kill(-pid, syscall.SIGKILL) }

func (p *Plugin) logger(idx int) *slog.Logger {
	return p.opts.Logger.With("flowlet", p.flowlet, "instance", idx, "plugin", p.path)
}

// handshakeError classifies a failed start.
func (p *Plugin) handshakeError(err error, lw *logWriter) error {
	msg := err.Error()
	tail := lw.tail()
	// The plugin's stderr is copied by another goroutine and can lag its
	// exit or its stdout closing (under load it did): a plugin refusing a
	// wrong cookie says so there, so wait a moment for it before
	// classifying a program that ended without a handshake.
	if ended := strings.Contains(msg, "Unrecognized remote plugin message") || strings.Contains(msg, "exited before we could connect"); ended {
		for deadline := time.Now().Add(time.Second); !strings.Contains(tail, "This binary is a plugin") && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			tail = lw.tail()
		}
	}
	var cause string
	switch {
	case strings.Contains(msg, "incompatible API version"):
		cause = fmt.Sprintf("protocol version mismatch: the host speaks version %d (%s)", plugin.ProtocolVersion, firstLine(msg))
	case strings.Contains(msg, "incompatible core API version"):
		cause = "go-plugin core protocol mismatch (" + firstLine(msg) + ")"
	case strings.Contains(tail, "This binary is a plugin"):
		cause = "the plugin exited before the handshake: its magic cookie (" + plugin.Handshake.MagicCookieKey +
			") did not match, so it is not a flowrun plugin or was built for another host"
	case strings.Contains(msg, "Unrecognized remote plugin message: \n") || strings.HasSuffix(firstLine(msg), "message: "):
		cause = "the program exited or closed stdout without a go-plugin handshake line; is it a flowrun plugin?"
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		cause = "the program did not print a go-plugin handshake line; is it a flowrun plugin? (" + firstLine(msg) + ")"
	case strings.Contains(msg, "exited before we could connect"):
		cause = "the plugin exited before the handshake"
	case strings.Contains(msg, "timeout while waiting for plugin to start"):
		cause = fmt.Sprintf("no handshake within %v", p.opts.StartTimeout)
	default:
		return &StartError{Flowlet: p.flowlet, Path: p.path, Err: fmt.Errorf("%w%s", err, indent(tail))}
	}
	if tail != "" {
		cause += "; plugin stderr:\n" + indent(tail)
	}
	return &HandshakeError{Flowlet: p.flowlet, Path: p.path, Cause: cause, Err: err}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

func (pr *proc) exited() bool { return pr.gp.Exited() }

func (pr *proc) tail() string {
	t := pr.logs.tail()
	if t == "" {
		return ""
	}
	return "\nplugin stderr (last lines):\n" + t
}

// kill ends the process and its children at once (SIGKILL: a hung plugin
// gets no grace) and waits for go-plugin's goroutines.
func (pr *proc) kill() {
	pr.once.Do(func() {
		pr.closeSteps()
		pr.killGroup()
		pr.gp.Kill()
		pr.cancel()
	})
}

// stop ends the process gracefully (after Close).
func (pr *proc) stop() {
	pr.once.Do(func() {
		pr.closeSteps()
		// go-plugin gives the process 2s to exit, kills it, and then waits
		// for its stdout and stderr, which a child of the plugin may hold.
		t := time.AfterFunc(3*time.Second, pr.killGroup)
		pr.gp.Kill()
		t.Stop()
		pr.cancel()
	})
}

// killGroup kills the process's group while the process has not been
// reaped (go-plugin reaps it once its pipes are closed): until then the
// group's id cannot name another group.
func (pr *proc) killGroup() {
	if pr.pid > 0 && !pr.gp.Exited() {
		_ = killGroup(pr.pid)
	}
}

// logWriter logs a plugin's stderr line by line: JSON lines (slog's or
// hclog's) at their level with their attributes, other lines at Info, or
// Error after a line starting a Go panic. It keeps the last lines for error
// messages.
type logWriter struct {
	mu     sync.Mutex
	logger *slog.Logger
	buf    []byte
	last   []string
	panic  bool
}

const tailLines = 30

// maxLogLine bounds a line of the plugin's stderr: a longer one is logged
// in pieces, so that output without newlines cannot grow the buffer. It is
// well above go-plugin's 64 KiB pieces: a JSON line (an error logged with
// a big attribute) must be whole to be logged at its level.
const maxLogLine = 1 << 20

// maxTailLine bounds a line as kept for error messages (the tail).
const maxTailLine = 2 << 10

func newLogWriter(l *slog.Logger) *logWriter { return &logWriter{logger: l} }

// syncWriter is the stream go-plugin copies the plugin's os.Stdout and
// os.Stderr to (after Serve replaced them); it has its own line buffer.
type syncWriter struct {
	lw  *logWriter
	buf []byte
	mu  sync.Mutex
}

func (lw *logWriter) sync() *syncWriter { return &syncWriter{lw: lw} }

func (w *syncWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var lines []string
	lines, w.buf = splitLines(append(w.buf, b...))
	for _, l := range lines {
		w.lw.line(l)
	}
	return len(b), nil
}

// splitLines returns the complete lines of buf, and pieces of maxLogLine
// bytes of a longer one, and what is left of buf.
func splitLines(buf []byte) (lines []string, rest []byte) {
	for {
		i := bytes.IndexByte(buf, '\n')
		switch {
		case i >= 0 && i <= maxLogLine:
			lines = append(lines, string(buf[:i]))
			buf = buf[i+1:]
		case len(buf) >= maxLogLine:
			lines = append(lines, string(buf[:maxLogLine]))
			buf = buf[maxLogLine:]
		default:
			return lines, buf
		}
	}
}

func (lw *logWriter) Write(b []byte) (int, error) {
	lw.mu.Lock()
	var lines []string
	lines, lw.buf = splitLines(append(lw.buf, b...))
	lw.mu.Unlock()
	for _, l := range lines {
		lw.line(l)
	}
	return len(b), nil
}

func (lw *logWriter) line(l string) {
	l = strings.TrimRight(l, "\r")
	if l == "" {
		return
	}
	kept := l
	if len(kept) > maxTailLine {
		n := maxTailLine
		for n > 0 && !utf8.RuneStart(kept[n]) {
			n--
		}
		kept = strings.Clone(kept[:n]) + fmt.Sprintf("… (%d bytes)", len(l))
	}
	lw.mu.Lock()
	lw.last = append(lw.last, kept)
	if len(lw.last) > tailLines {
		lw.last = lw.last[len(lw.last)-tailLines:]
	}
	if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
		lw.panic = true
	}
	inPanic := lw.panic
	logger := lw.logger
	lw.mu.Unlock()
	if strings.HasPrefix(l, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			logJSON(logger, m)
			return
		}
	}
	level := slog.LevelInfo
	if inPanic {
		level = slog.LevelError
	}
	logger.Log(context.Background(), level, "plugin: "+l)
}

// setLogger retags the lines (the spare process becomes some instance's).
func (lw *logWriter) setLogger(l *slog.Logger) {
	lw.mu.Lock()
	lw.logger = l
	lw.mu.Unlock()
}

func logJSON(logger *slog.Logger, m map[string]any) {
	level := slog.LevelInfo
	lv, _ := m["level"].(string)
	if lv == "" {
		lv, _ = m["@level"].(string)
	}
	switch strings.ToLower(lv) {
	case "trace", "debug":
		level = slog.LevelDebug
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	msg, _ := m["msg"].(string)
	if msg == "" {
		msg, _ = m["@message"].(string)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		switch k {
		case "level", "@level", "msg", "@message", "time", "@timestamp", "@module", "@caller":
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]any, 0, 2*len(keys))
	for _, k := range keys {
		attrs = append(attrs, k, m[k])
	}
	logger.Log(context.Background(), level, "plugin: "+msg, attrs...)
}

func (lw *logWriter) tail() string {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return strings.Join(lw.last, "\n")
}
