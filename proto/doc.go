// Package proto holds the plugin contract (flowlet.proto) and generates its Go
// code into proto/flowletpb. Regenerate after editing the .proto with
//
//	go generate ./proto
//
// which needs protoc (Debian: apt-get install protobuf-compiler; the
// committed code was made with libprotoc 3.21.12) and the Go plugins:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
package proto
