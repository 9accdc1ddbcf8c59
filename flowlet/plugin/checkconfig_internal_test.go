package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flowrun/flowrun/flowlet"
	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

// TestConfigResponse: a config error goes on the wire without the
// flowlet's name and field, which the host adds back, wrapped or not.
func TestConfigResponse(t *testing.T) {
	ce := &flowlet.ConfigError{Flowlet: "avg", Field: "posion", Msg: "unknown field"}
	cases := []struct {
		err           error
		field, msg    string
		hostFormatted string
	}{
		{ce, "posion", "unknown field", `flowlet "avg": config field "posion": unknown field`},
		{fmt.Errorf("window: %w", ce), "posion", "window: unknown field", `flowlet "avg": config field "posion": window: unknown field`},
		{&flowlet.ConfigError{Flowlet: "avg", Msg: "a and b are exclusive"}, "", "a and b are exclusive", `flowlet "avg": config: a and b are exclusive`},
		{errors.New(`flowlet "avg": bad window`), "", "bad window", `flowlet "avg": config: bad window`},
		{errors.New("bad window"), "", "bad window", `flowlet "avg": config: bad window`},
	}
	for _, c := range cases {
		r := configResponse("avg", c.err)
		if r.Field != c.field || r.Error != c.msg {
			t.Errorf("%v: got field %q, error %q; want %q, %q", c.err, r.Field, r.Error, c.field, c.msg)
		}
		if got := (&flowlet.ConfigError{Flowlet: "avg", Field: r.Field, Msg: r.Error}).Error(); got != c.hostFormatted {
			t.Errorf("%v: as the host says it: %q, want %q", c.err, got, c.hostFormatted)
		}
	}
}

type checking struct{ got flowlet.InitContext }

func (*checking) Process(flowlet.Context, flowlet.Event) error { return nil }

func (c *checking) CheckConfig(ic flowlet.InitContext) error {
	c.got = ic
	if ic.Config.Has("panic") {
		panic("boom")
	}
	return ic.Config.Known("size")
}

// TestServerCheckConfig: the server runs the ConfigChecker of a fresh value
// with the request's name, instances and config; a type without one is ok;
// a panic is an INTERNAL error.
func TestServerCheckConfig(t *testing.T) {
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	var last *checking
	s := newServer(nil, func() flowlet.Flowlet { last = &checking{}; return last }, flowlet.TypeInfo{SingleInstance: true}, devnull)
	if d, _ := s.Describe(context.Background(), &pb.DescribeRequest{}); !d.SingleInstance || !d.Process {
		t.Errorf("Describe: %v", d)
	}
	r, err := s.CheckConfig(context.Background(), &pb.InitRequest{Name: "avg", Instances: 3, ConfigJson: `{"size": 2, "sise": 1}`})
	if err != nil || r.Field != "sise" || r.Error != "unknown field; did you mean \"size\"? (known: size)" {
		t.Errorf("got %v, %v", r, err)
	}
	if last.got.Name != "avg" || last.got.Instances != 3 || last.got.Instance != 0 || s.f != nil {
		t.Errorf("checker saw %+v; the server's flowlet %v", last.got, s.f)
	}
	if r, err := s.CheckConfig(context.Background(), &pb.InitRequest{Name: "avg", ConfigJson: `{"size": 2}`}); err != nil || r.Error != "" || last.got.Instances != 1 {
		t.Errorf("a good config: %v, %v (instances %d)", r, err, last.got.Instances)
	}
	if _, err := s.CheckConfig(context.Background(), &pb.InitRequest{Name: "avg", ConfigJson: `{"panic": true}`}); status.Code(err) != codes.Internal {
		t.Errorf("a panic: %v", err)
	}
	if _, err := s.CheckConfig(context.Background(), &pb.InitRequest{Name: "avg", ConfigJson: `[`}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad JSON: %v", err)
	}
	plain := newServer(nil, func() flowlet.Flowlet { return &upperless{} }, flowlet.TypeInfo{}, devnull)
	if r, err := plain.CheckConfig(context.Background(), &pb.InitRequest{Name: "x", ConfigJson: `{"anything": 1}`}); err != nil || r.Error != "" {
		t.Errorf("a type without ConfigChecker: %v, %v", r, err)
	}
}

type upperless struct{}

func (upperless) Process(flowlet.Context, flowlet.Event) error { return nil }

// A plugin whose parent is already init when it starts was orphaned, unless
// its host is init itself (pid 1 in a container) or it was not started by a
// flowrun host at all.
func TestOrphanedAtStart(t *testing.T) {
	for _, c := range []struct {
		ppid int
		env  string
		want bool
	}{
		{1, "4242", true},  // the host was killed between fork and the plugin's start
		{0, "4242", true},  // no parent at all
		{1, "1", false},    // the host is pid 1
		{1, "", false},     // not started by a flowrun host: nothing to go by
		{1, "junk", false}, // nor with a bad value
		{4242, "4242", false},
		{777, "4242", false}, // a wrapper between host and plugin: watched as before
	} {
		if got := orphanedAtStart(c.ppid, c.env); got != c.want {
			t.Errorf("orphanedAtStart(%d, %q) = %v, want %v", c.ppid, c.env, got, c.want)
		}
	}
}
