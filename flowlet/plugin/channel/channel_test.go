package channel

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/flowrun/flowrun/proto/flowletpb"
)

func cert(der []byte, key any) tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// socketPair returns the two ends of a Unix socket connection (buffered,
// unlike net.Pipe, as between host and plugin).
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// pair connects a client with certificate own[0], expecting peer[0], to a
// server with own[1], expecting peer[1], and runs both handshakes.
func pair(t *testing.T, client, server [2][]byte, ckey, skey any) (*Conn, *Conn, error, error) {
	t.Helper()
	a, b := socketPair(t)
	ccfg := Config(cert(client[0], ckey), client[1])
	scfg := Config(cert(server[0], skey), server[1])
	c, s := Client(a, ccfg), Server(b, scfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serr := make(chan error, 1)
	go func() {
		err := s.Handshake(ctx)
		if err != nil {
			b.Close()
		}
		serr <- err
	}()
	cerr := c.Handshake(ctx)
	if cerr != nil {
		a.Close()
	}
	return c, s, cerr, <-serr
}

func TestChannel(t *testing.T) {
	hc, err := NewCert()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := NewCert()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewCert()
	if err != nil {
		t.Fatal(err)
	}
	h, p, o := hc.Certificate[0], pc.Certificate[0], other.Certificate[0]
	keys := map[string]any{string(h): hc.PrivateKey, string(p): pc.PrivateKey, string(o): other.PrivateKey}
	run := func(client, server [2][]byte) (*Conn, *Conn, error, error) {
		return pair(t, client, server, keys[string(client[0])], keys[string(server[0])])
	}

	// The right certificates: frames go both ways, buffers are reused.
	c, s, cerr, serr := run([2][]byte{h, p}, [2][]byte{p, h})
	if cerr != nil || serr != nil {
		t.Fatalf("handshake: %v / %v", cerr, serr)
	}
	big := bytes.Repeat([]byte("x"), 100<<10) // several TLS records
	for i := range 3 {
		call := &pb.StepCall{Op: pb.StepCall_PROCESS_BATCH, Batch: &pb.BatchRequest{
			Step: &pb.StepRequest{CallId: uint64(i + 1)}, Packed: &pb.PackedEvents{Payloads: big, PayloadEnds: []uint32{uint32(len(big))}}}}
		errc := make(chan error, 1)
		go func() { errc <- c.Write(call) }()
		var got pb.StepCall
		if err := s.Read(&got); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if got.Batch.GetStep().GetCallId() != uint64(i+1) || !bytes.Equal(got.Batch.GetPacked().GetPayloads(), big) {
			t.Fatalf("frame %d: %v", i, got.Batch.GetStep())
		}
		go func() { errc <- s.Write(&pb.StepResponse{Error: &pb.Error{Message: "m"}}) }()
		var resp pb.StepResponse
		if err := c.Read(&resp); err != nil || resp.GetError().GetMessage() != "m" {
			t.Fatalf("response %d: %v %v", i, err, &resp)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// A past deadline aborts a read at once; Close ends the peer's read.
	c.SetDeadline(time.Unix(1, 0))
	var resp pb.StepResponse
	if err := c.Read(&resp); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read after a past deadline: %v", err)
	}
	c.Close()
	var call pb.StepCall
	if err := s.Read(&call); err == nil {
		t.Error("read from a closed channel succeeded")
	}

	// A client with another certificate than the one the server was told
	// of is refused, and so is a server with another certificate.
	if _, _, cerr, serr := run([2][]byte{o, p}, [2][]byte{p, h}); serr == nil || !strings.Contains(serr.Error(), "not the one exchanged") {
		t.Errorf("server accepted a stranger: %v / %v", cerr, serr)
	}
	if _, _, cerr, _ := run([2][]byte{h, p}, [2][]byte{o, h}); cerr == nil || !strings.Contains(cerr.Error(), "not the one exchanged") {
		t.Errorf("client accepted a stranger: %v", cerr)
	}
}

// TestBadFrames: a frame longer than MaxFrame, a truncated frame and
// garbage fail with an error (no panic, no allocation of the claimed size).
func TestBadFrames(t *testing.T) {
	hc, _ := NewCert()
	pc, _ := NewCert()
	h, p := hc.Certificate[0], pc.Certificate[0]
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"too long", binary.BigEndian.AppendUint32(nil, MaxFrame+1), "exceeds"},
		{"truncated", append(binary.BigEndian.AppendUint32(nil, 10), 1, 2), io.ErrUnexpectedEOF.Error()},
		{"garbage", append(binary.BigEndian.AppendUint32(nil, 4), 0xff, 0xff, 0xff, 0xff), "unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s, cerr, serr := pair(t, [2][]byte{h, p}, [2][]byte{p, h}, hc.PrivateKey, pc.PrivateKey)
			if cerr != nil || serr != nil {
				t.Fatal(cerr, serr)
			}
			go func() {
				c.tls.Write(tc.frame)
				c.Close()
			}()
			var call pb.StepCall
			err := s.Read(&call)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestAcknowledgement: Open returns once the server's Accept has checked
// the client's certificate and acknowledged it; a server that refuses the
// client's certificate makes Open fail, although in TLS 1.3 the client's
// handshake alone succeeds.
func TestAcknowledgement(t *testing.T) {
	hc, _ := NewCert()
	pc, _ := NewCert()
	other, _ := NewCert()
	h, p := hc.Certificate[0], pc.Certificate[0]
	open := func(serverPeer []byte) (*Conn, *Conn, error, error) {
		a, b := socketPair(t)
		c, s := Client(a, Config(hc, p)), Server(b, Config(pc, serverPeer))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		serr := make(chan error, 1)
		go func() {
			err := s.Accept(ctx)
			if err != nil {
				b.Close()
			}
			serr <- err
		}()
		return c, s, c.Open(ctx), <-serr
	}
	c, s, cerr, serr := open(h)
	if cerr != nil || serr != nil {
		t.Fatalf("open: %v / %v", cerr, serr)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Write(&pb.StepCall{Op: pb.StepCall_TICK}) }()
	var call pb.StepCall
	if err := s.Read(&call); err != nil || call.Op != pb.StepCall_TICK {
		t.Fatalf("first frame after the acknowledgement: %v %v", err, &call)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	// The server expects another certificate: the client's handshake
	// succeeds (TLS 1.3), Open does not.
	a, b := socketPair(t)
	c = Client(a, Config(hc, p))
	rs := Server(b, Config(pc, other.Certificate[0]))
	go func() {
		rs.Accept(context.Background())
		b.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Handshake(ctx); err != nil {
		t.Fatalf("the client's handshake alone: %v", err)
	}
	if err := c.Open(ctx); err == nil || !strings.Contains(err.Error(), "no acknowledgement") || !strings.Contains(err.Error(), "bad certificate") {
		t.Errorf("Open with a refused certificate: %v", err)
	}
	_, _, cerr, serr = open(other.Certificate[0])
	if cerr == nil || serr == nil {
		t.Errorf("refused: Open %v, Accept %v", cerr, serr)
	}

	// A cancelled context ends the wait for the acknowledgement.
	a2, b2 := socketPair(t)
	c = Client(a2, Config(hc, p))
	go Server(b2, Config(pc, h)).Handshake(context.Background()) // no acknowledgement
	cctx, ccancel := context.WithCancel(context.Background())
	if err := c.Handshake(cctx); err != nil {
		t.Fatal(err)
	}
	ccancel()
	if err := c.Open(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a cancelled context: %v", err)
	}
}

// writeLog records the size of each write to the socket.
type writeLog struct {
	net.Conn
	mu     sync.Mutex
	writes []int
}

func (w *writeLog) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.writes = append(w.writes, len(b))
	w.mu.Unlock()
	return w.Conn.Write(b)
}

func (w *writeLog) take() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.writes
	w.writes = nil
	return n
}

// TestLargeFrameUnbuffered: a small frame goes out in one write to the
// socket; a frame over 1 MiB is not collected into an encrypted copy of
// itself first: no single write is near its size, and the connection does
// not keep such a buffer.
func TestLargeFrameUnbuffered(t *testing.T) {
	hc, _ := NewCert()
	pc, _ := NewCert()
	a, b := socketPair(t)
	wl := &writeLog{Conn: a}
	c, s := Client(wl, Config(hc, pc.Certificate[0])), Server(b, Config(pc, hc.Certificate[0]))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	aerr := make(chan error, 1)
	go func() { aerr <- s.Accept(ctx) }()
	if err := c.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-aerr; err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{100 << 10, 4 << 20} {
		wl.take()
		payload := bytes.Repeat([]byte("y"), size)
		errc := make(chan error, 1)
		go func() {
			errc <- c.Write(&pb.StepCall{Op: pb.StepCall_PROCESS_BATCH, Batch: &pb.BatchRequest{Packed: &pb.PackedEvents{Payloads: payload}}})
		}()
		var got pb.StepCall
		if err := s.Read(&got); err != nil || !bytes.Equal(got.Batch.GetPacked().GetPayloads(), payload) {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		writes := wl.take()
		if size < maxHeldFrame {
			if len(writes) != 1 {
				t.Errorf("a frame of %d bytes took %d writes, want 1", size, len(writes))
			}
			continue
		}
		if m := slices.Max(writes); m > maxHeldFrame {
			t.Errorf("a frame of %d bytes went out with a write of %d bytes (an encrypted copy of the frame)", size, m)
		}
		if n := cap(c.raw.buf); n > maxHeldFrame {
			t.Errorf("the connection keeps a write buffer of %d bytes", n)
		}
	}
}
