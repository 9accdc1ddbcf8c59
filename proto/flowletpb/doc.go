// Package flowletpb is the Go code of the plugin contract, proto/flowlet.proto
// (specs/plugins.md): the messages, the Flowlet service a plugin serves
// (Describe, Init, ProcessBatch, Generate, Tick, Close, the Steps stream,
// OpenChannel) and the Host service the host serves back to it for state
// reads and writes. protoc-gen-go and protoc-gen-go-grpc generate the
// *.pb.go files: never edit them; edit the .proto and regenerate (package
// proto says how).
//
// The SDK (flowlet/plugin), the host (internal/pluginhost) and the step
// channel (flowlet/plugin/channel) use it; a flowlet author does not.
//
// reuse.go is hand-written and about allocation on the step channel: each
// end decodes every frame into the same message (ResetForReuse,
// ResponseDecoder, CallDecoder), keeping the packed columns' capacity and
// slicing payloads out of the frame instead of copying them.
package flowletpb
