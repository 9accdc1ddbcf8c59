// Package pyupper holds a plugin flowlet written in Python (pyupper.py)
// against proto/flowlet.proto alone, without the Go SDK: the proof that a
// plugin may be written in any language with gRPC (specs/plugins.md, "A
// plugin in another language"). It upper-cases lines onto "out", counts
// them in the counters "lines" (key "n") and dead-letters lines starting
// with "bad". It needs Debian's python3-grpcio, python3-protobuf and
// python3-cryptography; its tests run it through internal/pluginhost and
// through the runtime.
//
// flowlet_pb2.py is generated from the .proto (protoc, Debian's
// protobuf-compiler; the committed file was made with libprotoc 3.21.12):
//
//	go generate ./examples/plugins/pyupper
package pyupper

//go:generate protoc --proto_path=../../../proto --python_out=. flowlet.proto
