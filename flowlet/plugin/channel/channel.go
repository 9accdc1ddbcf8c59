package channel

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"time"

	"google.golang.org/protobuf/proto"
)

// MaxFrame bounds a frame's message (as plugin.MaxMessageSize bounds a gRPC
// message).
const MaxFrame = 256 << 20

// maxKeptBuffer bounds the read and write buffers a Conn keeps between
// frames.
const maxKeptBuffer = 8 << 20

// maxHeldFrame is the largest frame whose TLS records are collected and
// written to the socket at once; a larger one is written a record at a
// time (the wake-ups it saves would cost another copy of the frame).
const maxHeldFrame = 1 << 20

// NewCert makes a fresh Ed25519 key and a self-signed certificate for one
// end of a channel (CN and DNS name localhost, valid from an hour ago for a
// year). Its DER, to send to the other end, is Certificate[0].
func NewCert() (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"flowrun plugin step channel"}},
		DNSNames:              []string{"localhost"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}

// Config is the TLS configuration of one end of a channel: TLS 1.3, own as
// its certificate, and a peer that must present exactly the certificate
// whose DER is peer (the server requires one). Chain verification is
// replaced by that comparison: the certificate was received over an
// authenticated connection, which is stronger than trusting an issuer.
func Config(own tls.Certificate, peer []byte) *tls.Config {
	peer = bytes.Clone(peer)
	return &tls.Config{
		Certificates:           []tls.Certificate{own},
		MinVersion:             tls.VersionTLS13,
		ClientAuth:             tls.RequireAnyClientCert,
		InsecureSkipVerify:     true, // #nosec G402 -- VerifyConnection pins the peer's certificate
		SessionTicketsDisabled: true,
		ServerName:             "localhost",
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(peer) == 0 || len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, peer) {
				return errors.New("flowrun step channel: the peer's certificate is not the one exchanged over the plugin connection")
			}
			return nil
		},
	}
}

// Conn is one end of a channel. It is not safe for concurrent use, except
// Close and SetDeadline, which may be called at any time (to abort a frame
// in flight).
type Conn struct {
	raw  *holdConn
	tls  *tls.Conn
	rbuf []byte
	wbuf []byte
	hdr  [4]byte
}

// Client wraps the host's end of a dialled connection; Server the plugin's
// end of an accepted one. Call Handshake before the first frame.
func Client(raw net.Conn, cfg *tls.Config) *Conn {
	h := &holdConn{Conn: raw}
	return &Conn{raw: h, tls: tls.Client(h, cfg)}
}

// Server: see Client.
func Server(raw net.Conn, cfg *tls.Config) *Conn {
	h := &holdConn{Conn: raw}
	return &Conn{raw: h, tls: tls.Server(h, cfg)}
}

// Handshake runs the TLS handshake (bounded by ctx). The ends of a step
// channel use Open and Accept, which add the acknowledgement.
func (c *Conn) Handshake(ctx context.Context) error { return c.tls.HandshakeContext(ctx) }

// Accept runs the plugin's (the server's) handshake, then sends the
// acknowledgement, an empty frame (a length of 0), which tells the host
// that its certificate was accepted. Both are bounded by ctx's deadline.
func (c *Conn) Accept(ctx context.Context) error {
	if err := c.tls.HandshakeContext(ctx); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(d); err != nil {
			return err
		}
	}
	var ack [4]byte
	if _, err := c.tls.Write(ack[:]); err != nil {
		return fmt.Errorf("flowrun step channel: acknowledgement: %w", err)
	}
	return c.SetDeadline(time.Time{})
}

// Open runs the host's (the client's) handshake, then waits for the
// plugin's acknowledgement (see Accept), both bounded by ctx. In TLS 1.3 the
// client's handshake completes before the server has checked the client's
// certificate: a plugin that refuses the host's certificate makes Open
// fail (with its TLS alert), not the first step.
func (c *Conn) Open(ctx context.Context) error {
	if err := c.tls.HandshakeContext(ctx); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(d); err != nil {
			return err
		}
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		_ = c.SetDeadline(time.Unix(1, 0))
	})
	_, err := io.ReadFull(c.tls, c.hdr[:])
	if !stop() {
		<-done // its past deadline must not land after the one set below
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return fmt.Errorf("flowrun step channel: no acknowledgement from the plugin: %w", err)
	}
	if n := binary.BigEndian.Uint32(c.hdr[:]); n != 0 {
		return fmt.Errorf("flowrun step channel: the plugin's first frame (%d bytes) is not an acknowledgement", n)
	}
	return c.SetDeadline(time.Time{})
}

// SetDeadline bounds the frames in flight and the next ones; a past time
// makes a blocked Read or Write fail at once.
func (c *Conn) SetDeadline(t time.Time) error { return c.raw.SetDeadline(t) }

// Close closes the connection at once (without TLS's close_notify, which
// could wait behind a blocked Write).
func (c *Conn) Close() error { return c.raw.Conn.Close() }

// Write sends m as one frame, in one write to the socket when it is at
// most 1 MiB (maxHeldFrame), else straight through as TLS makes its
// records.
func (c *Conn) Write(m proto.Message) error {
	b, err := proto.MarshalOptions{}.MarshalAppend(append(c.wbuf[:0], 0, 0, 0, 0), m)
	if err != nil {
		return fmt.Errorf("flowrun step channel: marshal: %w", err)
	}
	if len(b)-4 > MaxFrame {
		return fmt.Errorf("flowrun step channel: a message of %d bytes exceeds %d", len(b)-4, MaxFrame)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if cap(b) <= maxKeptBuffer {
		c.wbuf = b[:0]
	} else {
		c.wbuf = nil
	}
	if len(b) > maxHeldFrame {
		_, err = c.tls.Write(b) // a record at a time: no encrypted copy
		return err
	}
	// TLS writes a record per 16 KiB; the records go out in one write, so
	// the peer wakes up once per frame.
	c.raw.hold = true
	_, err = c.tls.Write(b)
	c.raw.hold = false
	if ferr := c.raw.flush(); err == nil {
		err = ferr
	}
	return err
}

// Read reads one frame into m (which is reset first). A connection closed
// between frames is io.EOF.
func (c *Conn) Read(m proto.Message) error {
	b, err := c.ReadFrame()
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("flowrun step channel: unmarshal: %w", err)
	}
	return nil
}

// ReadFrame reads one frame and returns its message undecoded, for a
// caller that decodes it itself (into a message whose buffers it reuses,
// say). The bytes are valid until the next Read or ReadFrame. A connection
// closed between frames is io.EOF.
func (c *Conn) ReadFrame() ([]byte, error) {
	if _, err := io.ReadFull(c.tls, c.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(c.hdr[:])
	if n > MaxFrame {
		return nil, fmt.Errorf("flowrun step channel: a frame of %d bytes exceeds %d", n, MaxFrame)
	}
	if cap(c.rbuf) < int(n) {
		c.rbuf = make([]byte, n)
	}
	b := c.rbuf[:n]
	if _, err := io.ReadFull(c.tls, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if cap(c.rbuf) > maxKeptBuffer {
		c.rbuf = nil
	}
	return b, nil
}

// holdConn collects the writes made while hold is set, for flush to send in
// one system call.
type holdConn struct {
	net.Conn
	hold bool
	buf  []byte
}

func (h *holdConn) Write(b []byte) (int, error) {
	if !h.hold {
		return h.Conn.Write(b)
	}
	h.buf = append(h.buf, b...)
	return len(b), nil
}

func (h *holdConn) flush() error {
	if len(h.buf) == 0 {
		return nil
	}
	_, err := h.Conn.Write(h.buf)
	if cap(h.buf) > maxKeptBuffer {
		h.buf = nil
	} else {
		h.buf = h.buf[:0]
	}
	return err
}
