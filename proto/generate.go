package proto

//go:generate protoc --proto_path=. --go_out=flowletpb --go_opt=paths=source_relative --go-grpc_out=flowletpb --go-grpc_opt=paths=source_relative flowlet.proto
