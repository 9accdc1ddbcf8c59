// Package channel is the step channel between the flowrun host and a plugin
// process (specs/plugins.md, "Step channel"): a connection of its own, next
// to go-plugin's gRPC connection, that carries each step as one frame each
// way, read and written by the goroutine that makes (or serves) the step.
// It has no HTTP/2 framing, flow control or stream goroutines, which on a
// busy machine cost more than the data of a step.
//
// Security is that of go-plugin's AutoMTLS: each end makes a fresh key and
// self-signed certificate (NewCert), the two certificates are exchanged over
// the AutoMTLS gRPC connection (the Flowlet service's OpenChannel call), and
// each end accepts, over TLS 1.3, exactly the other's certificate, byte for
// byte (Config).
//
// A frame is a 4-byte big-endian length and a protobuf message: the host
// writes a flowletpb.StepCall, the plugin answers with a
// flowletpb.StepResponse. Before the first step the plugin acknowledges the
// handshake with an empty frame (Accept, Open): in TLS 1.3 the client's
// handshake is complete before the server has verified the client's
// certificate, so without it a plugin that refused the host's certificate
// would only show at the first step. Both the Go SDK (flowlet/plugin) and the host
// (internal/pluginhost) use this package; a plugin in another language may
// implement OpenChannel the same way or leave it unimplemented.
package channel
