// Command badversion is a plugin that speaks a protocol version the host
// does not: the handshake must fail with a clear error.
package main

import (
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/flowrun/flowrun/flowlet/plugin"
)

func main() {
	hs := plugin.Handshake
	hs.ProtocolVersion = 99
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         goplugin.PluginSet{},
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
}
