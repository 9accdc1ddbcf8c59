package pluginhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// loggedFallBack: the socket directories' move to /tmp is logged once.
var loggedFallBack atomic.Bool

// Options configure how plugins are built and run. The zero value is usable.
type Options struct {
	// Logger receives the plugins' stderr (tagged with flowlet and
	// instance), restarts and builds (Info when a build runs, Debug for a
	// cache hit). Default: discard.
	Logger *slog.Logger
	// CacheDir holds built plugins. Default: flowrun/plugins in the user's
	// cache directory (os.UserCacheDir), else in the temporary directory.
	CacheDir string
	// GoCommand builds package directories. Default: "go" (in PATH).
	GoCommand string
	// BuildFlags are passed to go build (before the package).
	BuildFlags []string
	// CallTimeout bounds every call into the plugin (Init, a step, Close).
	// A plugin that exceeds it is killed and the call fails. Default: 30s.
	CallTimeout time.Duration
	// StartTimeout bounds the handshake of a starting plugin; the plugin's
	// process group is killed then. Default: 30s.
	StartTimeout time.Duration
	// RestartBackoff is the wait before restarting a failed plugin,
	// doubled for each further failure in a row up to MaxRestartBackoff.
	// Defaults: 10ms and 2s.
	RestartBackoff, MaxRestartBackoff time.Duration
	// Env is added to the plugin processes' environment (which is the
	// host's otherwise), overriding the host's variables of the same name;
	// go-plugin's handshake variables (the magic cookie, the protocol
	// versions, PLUGIN_CLIENT_CERT, PLUGIN_UNIX_SOCKET_DIR) override both.
	Env []string
	// CacheMaxAge: built plugins unused for this long are removed from
	// CacheDir, checked at most once a day by a build (cache.go). Default
	// DefaultCacheMaxAge (5 days); negative keeps everything.
	CacheMaxAge time.Duration
}

func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.CacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		o.CacheDir = filepath.Join(base, "flowrun", "plugins")
	}
	if o.CacheMaxAge == 0 {
		o.CacheMaxAge = DefaultCacheMaxAge
	}
	if o.GoCommand == "" {
		o.GoCommand = "go"
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.RestartBackoff <= 0 {
		o.RestartBackoff = 10 * time.Millisecond
	}
	if o.MaxRestartBackoff < o.RestartBackoff {
		o.MaxRestartBackoff = max(2*time.Second, o.RestartBackoff)
	}
}

// Plugin is one flowlet's plugin: a binary and what its type declares.
type Plugin struct {
	flowlet string
	path    string // as written
	bin     string // the executable: the cache's for a built plugin
	exe     string // what processes start: bin, or a hard link of it in sockDir
	built   bool   // bin is in the build cache
	// stopFresh ends keepFresh, which closes freshDone as it returns (nil:
	// processes start from a link).
	stopFresh, freshDone chan struct{}
	sockDir              string // holds each process's PLUGIN_UNIX_SOCKET_DIR (proc.go)
	opts                 Options
	info                 *pb.TypeInfo

	mu     sync.Mutex
	spare  *proc // the process Open described the type with, for the first instance
	live   map[*inst]struct{}
	closed bool
}

// Open prepares the plugin of the flowlet named flowletName: path is the
// flowlet's `plugin:` field and appDir the directory of the app file
// (relative paths are relative to it). A directory is built as a Go main
// package (Build); anything else must be an executable. Open starts the
// plugin once to learn its type (Describe) and keeps that process for the
// first instance. Errors are a *BuildError, a *HandshakeError or a
// *StartError, each naming the flowlet.
func Open(ctx context.Context, flowletName, path, appDir string, opts Options) (*Plugin, error) {
	opts.defaults()
	p := &Plugin{flowlet: flowletName, path: path, opts: opts, live: map[*inst]struct{}{}}
	full := Resolve(path, appDir)
	st, err := os.Stat(full)
	if err != nil {
		return nil, &StartError{Flowlet: flowletName, Path: path, Err: err}
	}
	if st.IsDir() {
		if p.bin, err = Build(ctx, flowletName, full, opts); err != nil {
			return nil, err
		}
	} else {
		if st.Mode()&0o111 == 0 {
			return nil, &StartError{Flowlet: flowletName, Path: path, Err: errors.New("not executable (a plugin is a Go package directory or an executable)")}
		}
		p.bin = full
	}
	// The plugins' sockets go to a directory of their own, removed at Close:
	// a plugin killed with kill -9 cannot leave its socket file in /tmp. It
	// records its owner; the directories of owners that are gone (a host
	// killed with kill -9) are removed here (sockdir.go). It is in /tmp
	// when a socket path under $TMPDIR could be too long.
	var fellBack bool
	if p.sockDir, fellBack, err = makeSockDir(os.TempDir(), shortTempDir); err != nil {
		return nil, &StartError{Flowlet: flowletName, Path: path, Err: err}
	}
	if fellBack && !loggedFallBack.Swap(true) {
		opts.Logger.Info("plugin sockets go to "+shortTempDir+": TMPDIR is too long for Unix socket paths",
			"tmpdir", os.TempDir(), "max_tmpdir_bytes", sockParentMax, "socket_dir", p.sockDir)
	}
	p.exe = p.bin
	if p.built = st.IsDir(); p.built {
		// Processes start from a hard link of our own: the cache entry may
		// be trimmed by another app while this one runs (cache.go). Where
		// the cache is on another file system (a tmpfs /tmp) the link
		// fails; a copy there would cost RAM and may not run (noexec), so
		// the host keeps the entry fresh instead while it is open.
		own := filepath.Join(p.sockDir, filepath.Base(p.bin))
		if linkFile(p.bin, own) == nil {
			p.exe = own
		} else {
			p.stopFresh, p.freshDone = make(chan struct{}), make(chan struct{})
			go func() {
				defer close(p.freshDone)
				keepFresh(p.bin, usedRefresh, p.stopFresh)
			}()
		}
	}
	pr, err := p.start(ctx, 0)
	if err != nil {
		p.abandon()
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, opts.CallTimeout)
	defer cancel()
	info, err := pr.client.Describe(dctx, &pb.DescribeRequest{})
	if err != nil {
		pr.kill()
		p.abandon()
		return nil, &StartError{Flowlet: flowletName, Path: path, Err: fmt.Errorf("describe: %w%s", err, pr.tail())}
	}
	if !info.Process && !info.Generate && !info.Tick {
		pr.kill()
		p.abandon()
		return nil, &StartError{Flowlet: flowletName, Path: path, Err: errors.New("the plugin's flowlet implements none of Process, ProcessBatch, Generate and Tick")}
	}
	for _, o := range info.Outputs {
		// Outputs name queues, as a built-in type's do (flowlet.Register).
		if err := flowlet.CheckOutputName(o); err != nil {
			pr.kill()
			p.abandon()
			return nil, &StartError{Flowlet: flowletName, Path: path, Err: fmt.Errorf("its declared outputs: %w", err)}
		}
	}
	p.info, p.spare = info, pr
	return p, nil
}

// linkFile is os.Link (a test makes it fail, as across file systems).
var linkFile = os.Link

// Binary is the plugin's executable (in the build cache for a package
// directory).
func (p *Plugin) Binary() string { return p.bin }

// Info is what the plugin's flowlet type declares.
func (p *Plugin) Info() flowlet.TypeInfo {
	return flowlet.TypeInfo{Outputs: append([]string(nil), p.info.Outputs...), Source: p.info.Source, Sink: p.info.Sink, Doc: p.info.Doc,
		SingleInstance: p.info.SingleInstance}
}

// CheckConfig asks the plugin to check the config of its flowlet (the one
// Open was given) for the given instance count, without side effects: the
// plugin's CheckConfig call (the Go SDK runs the type's
// flowlet.ConfigChecker), on the process Open kept for the first instance
// (started anew if it is gone), which stays for it. A config the plugin
// refuses is a *flowlet.ConfigError of the flowlet, whose ConfigField
// names the field it is about (empty for the config as a whole). A plugin
// that does not implement the call (UNIMPLEMENTED: a plugin built with an
// older SDK, or written without it) has nothing to check: nil. A call that
// fails otherwise is a *StartError (a cancelled ctx, one that does not
// start, crashes or exceeds Options.CallTimeout); that process is killed.
func (p *Plugin) CheckConfig(ctx context.Context, instances int, config map[string]any) error {
	js, err := configJSON(p.flowlet, config)
	if err != nil {
		return err
	}
	pr := p.takeSpare()
	if pr == nil {
		if pr, err = p.start(ctx, 0); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	defer cancel()
	r, err := pr.client.CheckConfig(cctx, &pb.InitRequest{Name: p.flowlet, Instances: int32(max(instances, 1)), ConfigJson: js})
	if err == nil || (status.Code(err) == codes.Unimplemented && !pr.exited()) {
		p.putSpare(pr)
		if err != nil || r.Error == "" {
			return nil
		}
		return &flowlet.ConfigError{Flowlet: p.flowlet, Field: r.Field, Msg: r.Error}
	}
	var cause error
	switch st, ok := status.FromError(err); {
	case ctx.Err() != nil:
		cause = fmt.Errorf("check config: interrupted: %w", ctx.Err())
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		cause = fmt.Errorf("check config: no answer within the deadline of %v", p.opts.CallTimeout)
	case ok && !pr.exited() && st.Code() != codes.Unavailable:
		cause = fmt.Errorf("check config: %s", st.Message())
	default:
		cause = fmt.Errorf("check config: %w", err)
	}
	pr.kill()
	if t := pr.tail(); t != "" {
		cause = fmt.Errorf("%w%s", cause, t)
	}
	return &StartError{Flowlet: p.flowlet, Path: p.path, Err: cause}
}

// configJSON is a flowlet's config as the contract sends it.
func configJSON(name string, config map[string]any) (string, error) {
	if config == nil {
		config = map[string]any{}
	}
	js, err := json.Marshal(config)
	if err != nil {
		return "", fmt.Errorf("flowlet %q: plugin config cannot be sent as JSON: %w", name, err)
	}
	return string(js), nil
}

// Type is the plugin as a flowlet type: Name is "plugin " and the path as
// written, New makes one instance (started lazily, at Init or its first
// call).
func (p *Plugin) Type() flowlet.Type {
	return flowlet.Type{Name: "plugin " + p.path, New: p.New, Info: p.Info()}
}

// New returns a new instance. Its dynamic type implements
// flowlet.Initializer and flowlet.Closer, flowlet.BatchProcessor unless the
// plugin is a source, and flowlet.Source and flowlet.Ticker when the
// plugin's flowlet does.
func (p *Plugin) New() flowlet.Flowlet {
	in := &inst{p: p, name: p.flowlet, instances: 1}
	p.mu.Lock()
	p.live[in] = struct{}{}
	p.mu.Unlock()
	switch i := p.info; {
	case i.Generate && i.Tick:
		return srcTickF{in}
	case i.Generate:
		return srcF{in}
	case i.Process && i.Tick:
		return batchTickF{in}
	case i.Process:
		return batchF{in}
	default:
		return tickF{in}
	}
}

// Close kills every process the plugin still has (instances that were not
// closed, the spare).
func (p *Plugin) Close() error {
	p.mu.Lock()
	spare := p.spare
	p.spare, p.closed = nil, true
	var live []*inst
	for in := range p.live {
		live = append(live, in)
	}
	p.mu.Unlock()
	if spare != nil {
		spare.kill()
	}
	for _, in := range live {
		in.kill()
	}
	return p.abandon()
}

// abandon releases what Open set up besides processes: the goroutine that
// keeps the cache entry fresh (waiting for it to end) and the socket
// directory.
func (p *Plugin) abandon() error {
	if p.stopFresh != nil {
		close(p.stopFresh)
		<-p.freshDone
		p.stopFresh = nil
	}
	return os.RemoveAll(p.sockDir)
}

func (p *Plugin) takeSpare() *proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.spare
	p.spare = nil
	if s != nil && s.exited() {
		go s.kill()
		return nil
	}
	return s
}

// putSpare keeps pr for the first instance, unless there is a spare
// already or the plugin was closed.
func (p *Plugin) putSpare(pr *proc) {
	p.mu.Lock()
	keep := p.spare == nil && !p.closed
	if keep {
		p.spare = pr
	}
	p.mu.Unlock()
	if !keep {
		pr.kill()
	}
}

// adopt makes pr in's process unless the plugin was closed meanwhile:
// Close kills the processes its instances have, so one that started
// during Close must not be kept. It reports whether in has pr.
func (p *Plugin) adopt(in *inst, pr *proc) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	in.setProc(pr)
	return true
}

func (p *Plugin) forget(in *inst) {
	p.mu.Lock()
	delete(p.live, in)
	p.mu.Unlock()
}

// StartError is a plugin that could not be started or described.
type StartError struct {
	Flowlet, Path string
	Err           error
}

func (e *StartError) Error() string {
	return fmt.Sprintf("flowlet %q: plugin %s: %v", e.Flowlet, e.Path, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// HandshakeError is a plugin whose handshake failed: a protocol version the
// host does not speak, a missing magic cookie (not a flowrun plugin, or run
// without the host's environment), or no handshake line at all.
type HandshakeError struct {
	Flowlet, Path string
	// Cause says what went wrong, with the plugin's stderr when it said
	// anything.
	Cause string
	Err   error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("flowlet %q: plugin %s: handshake failed: %s", e.Flowlet, e.Path, e.Cause)
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// CallError is a call the plugin process did not answer: it crashed,
// exited, broke the connection or exceeded the deadline, or the host could
// not send the request. The process has been killed (its message says
// whether it had exited by itself); the next call starts a new one.
type CallError struct {
	Flowlet  string
	Instance int
	Op       string // "Init", "ProcessBatch", "Generate", "Tick", "Close"
	// Timeout is set when the call exceeded Options.CallTimeout.
	Timeout bool
	Err     error
	// Stderr is the end of what the process wrote to stderr (a panic's
	// stack, say).
	Stderr string
}

func (e *CallError) Error() string {
	s := fmt.Sprintf("flowlet %q instance %d: plugin %s failed: %v", e.Flowlet, e.Instance, e.Op, e.Err)
	if e.Stderr != "" {
		s += "\nplugin stderr (last lines):\n" + e.Stderr
	}
	return s
}

func (e *CallError) Unwrap() error { return e.Err }

// StepError is an error the plugin's flowlet returned from a step (or a
// panic the SDK recovered). Its message is the flowlet's.
type StepError struct {
	Flowlet  string
	Instance int
	Op       string
	Message  string
	Panic    bool
	Stack    string
	// Events are the indexes in the batch of the events the error is
	// about, when the plugin said.
	Events []int
	perm   bool
}

func (e *StepError) Error() string { return e.Message }

// Permanent reports whether the plugin said retrying cannot help.
func (e *StepError) Permanent() bool { return e.perm }

// ResponseError is a step's response the host refuses: malformed packed
// emits, an emit's priority beyond the queue's 0..255, a dead letter of an
// event not in the batch. A plugin of another SDK (or a bug in one) sent
// it; the step fails as with any error.
type ResponseError struct {
	Flowlet string
	Problem string // what is wrong, as "the plugin returned …" goes on
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("flowlet %q: the plugin returned %s", e.Flowlet, e.Problem)
}

// InitError is a plugin's Init that returned an error. Its message is the
// plugin's, after "plugin init: ": it does not repeat the flowlet and
// instance, which the caller names (the runtime says `flowlet "x" instance
// 0: init: plugin init: ...`), and which are in its fields.
type InitError struct {
	Flowlet  string
	Instance int
	Message  string
}

func (e *InitError) Error() string {
	return "plugin init: " + e.Message
}
