package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"

	"github.com/flowrun/flowrun/flowlet"
	"github.com/flowrun/flowrun/proto/flowletpb"
)

// ProtocolVersion is the version of the plugin contract (proto/flowlet.proto)
// this SDK speaks. The host refuses a plugin of another version.
const ProtocolVersion = 1

// Name is the go-plugin plugin name under which the Flowlet service is
// dispensed.
const Name = "flowlet"

// Handshake is the go-plugin handshake shared by host and plugins: a magic
// cookie (so a plugin binary run by hand says what it is instead of waiting)
// and the protocol version.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "FLOWRUN_PLUGIN",
	MagicCookieValue: "flowlet-5c1d0a3e",
}

// MaxMessageSize bounds a gRPC message either way (a batch, a step's
// response).
const MaxMessageSize = 256 << 20

// WindowSize is the HTTP/2 flow-control window host and plugin use, so that
// a large batch goes out without waiting for window updates.
const WindowSize = 16 << 20

// IOBufferSize is the size of the connection's read and write buffers on
// both ends (gRPC's default is 32 KiB): a batch of a few hundred events
// goes out in one flush and comes in with fewer reads.
const IOBufferSize = 512 << 10

// Serve serves the flowlet type whose values newFlowlet makes, described by
// info, and returns when the host is done with the process. Call it from
// main. It exits the process with status 1 when the flowlet does not qualify
// (flowlet.Check).
func Serve(newFlowlet func() flowlet.Flowlet, info flowlet.TypeInfo) {
	if err := check(newFlowlet, info); err != nil {
		fmt.Fprintln(os.Stderr, "flowrun plugin:", err)
		os.Exit(1)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// One step at a time on one goroutine: more Ps only add threads
		// that spin and wake each other up, competing with the host for
		// the cores (on two busy cores, 10-30% of the plugin's throughput).
		runtime.GOMAXPROCS(1)
	}
	stderr := os.Stderr // go-plugin replaces os.Stderr with a pipe; log to the real one
	if prefix := os.Getenv(ProfileEnv); prefix != "" {
		startProfile(prefix)
	}
	go exitWithHost(os.Getppid())
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins: goplugin.PluginSet{Name: &grpcPlugin{
			newFlowlet: newFlowlet, info: info, stderr: stderr,
		}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize),
				grpc.InitialWindowSize(WindowSize), grpc.InitialConnWindowSize(WindowSize),
				experimental.BufferPool(BufferPool), grpc.WriteBufferSize(IOBufferSize), grpc.ReadBufferSize(IOBufferSize))
			return grpc.NewServer(opts...)
		},
		Logger: hclog.New(&hclog.LoggerOptions{
			Name: "go-plugin", Level: hclog.Warn, Output: stderr, JSONFormat: true,
		}),
	})
}

// HostPIDEnv names the environment variable in which the host gives its
// pid to the plugin processes it starts.
const HostPIDEnv = "FLOWRUN_PLUGIN_HOST_PID"

// exitWithHost exits the process once its parent, the host, is gone (a
// host killed with SIGKILL cannot stop its plugins; they are reparented).
func exitWithHost(host int) {
	if orphanedAtStart(host, os.Getenv(HostPIDEnv)) {
		fmt.Fprintln(os.Stderr, "flowrun plugin: the host process was gone before the plugin started; exiting")
		os.Exit(2)
	}
	if host <= 1 {
		return
	}
	for {
		time.Sleep(250 * time.Millisecond)
		if os.Getppid() != host {
			fmt.Fprintln(os.Stderr, "flowrun plugin: the host process is gone; exiting")
			os.Exit(2)
		}
	}
}

// orphanedAtStart reports whether a plugin whose parent is ppid at its
// start was reparented already: its host (hostEnv, HostPIDEnv) was killed
// between starting it and its first look. A parent pid of 1 is the host
// itself only when the host is pid 1 (a container's init).
func orphanedAtStart(ppid int, hostEnv string) bool {
	host, err := strconv.Atoi(hostEnv)
	return ppid <= 1 && err == nil && host > 1
}

// ProfileEnv names an environment variable for diagnostics: when set, the
// plugin writes a CPU profile of its life to "$FLOWRUN_PLUGIN_CPUPROFILE.<pid>",
// complete once the host closed the instance (go tool pprof reads it).
const ProfileEnv = "FLOWRUN_PLUGIN_CPUPROFILE"

var stopProfile = func() {}

func startProfile(prefix string) {
	f, err := os.Create(fmt.Sprintf("%s.%d", prefix, os.Getpid()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "flowrun plugin: cpu profile:", err)
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		fmt.Fprintln(os.Stderr, "flowrun plugin: cpu profile:", err)
		return
	}
	var once sync.Once
	stopProfile = func() { once.Do(func() { pprof.StopCPUProfile(); f.Close() }) }
}

// ServeType serves the flowlet type registered under name (flowlet.Register),
// with its registered TypeInfo.
func ServeType(name string) {
	t, ok := flowlet.Lookup(name)
	if !ok {
		fmt.Fprintf(os.Stderr, "flowrun plugin: no flowlet type %q is registered\n", name)
		os.Exit(1)
	}
	Serve(t.New, t.Info)
}

func check(newFlowlet func() flowlet.Flowlet, info flowlet.TypeInfo) error {
	if newFlowlet == nil {
		return errors.New("nil flowlet factory")
	}
	return flowlet.Check(newFlowlet(), info)
}

// grpcPlugin is the plugin side of the go-plugin plugin.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	newFlowlet func() flowlet.Flowlet
	info       flowlet.TypeInfo
	stderr     *os.File
}

func (p *grpcPlugin) GRPCServer(broker *goplugin.GRPCBroker, s *grpc.Server) error {
	flowletpb.RegisterFlowletServer(s, newServer(broker, p.newFlowlet, p.info, p.stderr))
	return nil
}

func (p *grpcPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("flowrun plugin: the plugin side has no client")
}

// Describe returns the wire form of what a flowlet type declares and
// implements (f is a value of the type).
func Describe(f flowlet.Flowlet, info flowlet.TypeInfo) *flowletpb.TypeInfo {
	_, proc := f.(flowlet.Processor)
	_, batch := f.(flowlet.BatchProcessor)
	_, gen := f.(flowlet.Source)
	_, tick := f.(flowlet.Ticker)
	return &flowletpb.TypeInfo{
		Outputs: append([]string(nil), info.Outputs...), Source: info.Source, Sink: info.Sink, Doc: info.Doc,
		Process: proc || batch, Generate: gen, Tick: tick, SingleInstance: info.SingleInstance,
	}
}
