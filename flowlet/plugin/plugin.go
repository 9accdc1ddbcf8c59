// Package plugin runs a flowlet in a process of its own, as a plugin of the
// flowrun host (specs/plugins.md). A plugin author writes the same flowlet as
// a built-in one (package flowlet: Process or ProcessBatch, Generate, Tick,
// Init, Close) and serves it from main:
//
//	package main
//
//	import (
//		"github.com/flowrun/flowrun/flowlet"
//		"github.com/flowrun/flowrun/flowlet/plugin"
//	)
//
//	func main() {
//		plugin.Serve(func() flowlet.Flowlet { return &Upper{} },
//			flowlet.TypeInfo{Outputs: []string{"out"}, Doc: "upper-cases lines"})
//	}
//
// The app YAML names the plugin's package directory (built on demand) or its
// binary in the flowlet's `plugin:` field. The host starts one process per
// flowlet instance and talks to it over gRPC (hashicorp/go-plugin, with a
// versioned handshake and automatic mutual TLS). Each step is one call: the
// host sends the batch, the SDK calls the flowlet with a flowlet.Context
// whose emits and writes are collected and returned with the call's result;
// the host applies them in the step's transaction. State reads (Get, Scan)
// call back to the host, so they see the transaction's snapshot and the
// step's own writes.
//
// Differences from an in-process flowlet, all within the flowlet.Context
// contract: Emit, Put, Delete and Add check what they can locally (the key
// size) and return nil; the host applies them when the step's call returns
// (writes also with the next read), and a failure there fails the step. A
// panic in flowlet code is recovered and fails the step, as in the runtime.
// A crash or a hang of the process fails the step too; the host restarts the
// process (and calls Init again) before the next step.
//
// Steps travel over the step channel (package flowlet/plugin/channel): a
// connection of its own, opened after Init, on which each step is one frame
// each way.
//
// The process runs with GOMAXPROCS=1 unless the environment sets GOMAXPROCS
// (the host's Options.Env, say): it makes one step at a time, and spare Ps
// only compete with the host for the cores. A flowlet that parallelizes its
// own work may call runtime.GOMAXPROCS in its Init.
//
// Logging: the Logger of InitContext and Context writes JSON lines to the
// process's stderr, which the host logs, tagged with the flowlet and
// instance; anything else written to stderr is logged as well.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
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

// exitWithHost exits the process once its parent, the host, is gone (a
// host killed with SIGKILL cannot stop its plugins; they are reparented).
func exitWithHost(host int) {
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
		Process: proc || batch, Generate: gen, Tick: tick,
	}
}
