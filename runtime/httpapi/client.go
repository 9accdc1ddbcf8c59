package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/flowrun/flowrun/runtime"
)

// AddrFile is the file in an app's data directory where a running app
// writes how to reach its HTTP server; `flowrun status|top|scale` read it.
const AddrFile = "http.json"

// AddrInfo is AddrFile's content. The token itself is never written.
type AddrInfo struct {
	URL           string    `json:"url"`
	PID           int       `json:"pid"`
	App           string    `json:"app"`
	TokenRequired bool      `json:"token_required"`
	Started       time.Time `json:"started"`
}

// WriteAddrFile writes info to dir/AddrFile (atomically, mode 0600).
func WriteAddrFile(dir string, info AddrInfo) error {
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, AddrFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, AddrFile))
}

// RemoveAddrFile removes dir/AddrFile if this process wrote it.
func RemoveAddrFile(dir string) {
	if info, err := ReadAddrFile(dir); err == nil && info.PID == os.Getpid() {
		os.Remove(filepath.Join(dir, AddrFile))
	}
}

// ReadAddrFile reads dir/AddrFile.
func ReadAddrFile(dir string) (AddrInfo, error) {
	var info AddrInfo
	b, err := os.ReadFile(filepath.Join(dir, AddrFile))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("%s: %w (a damaged file: remove it, or pass --addr)", filepath.Join(dir, AddrFile), err)
	}
	return info, nil
}

// Client talks to a running app's API.
type Client struct {
	// URL is the server's base URL ("http://127.0.0.1:7070"); a bare
	// host:port gets "http://".
	URL   string
	Token string
	HTTP  *http.Client
}

// APIError is an error answer of the server.
type APIError struct {
	Code int
	Msg  string
}

func (e *APIError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Msg, e.Code) }

func (c *Client) base() string {
	u := strings.TrimSuffix(c.URL, "/")
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return u
}

// Do sends a request and decodes a JSON answer into out (unless nil).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 3 * time.Minute}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e errorJSON
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return &APIError{resp.StatusCode, e.Error}
		}
		return &APIError{resp.StatusCode, strings.TrimSpace(string(data))}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// Status is GET /api/v1/status.
func (c *Client) Status(ctx context.Context) (runtime.Status, error) {
	var st runtime.Status
	err := c.Do(ctx, http.MethodGet, "/api/v1/status", nil, &st)
	return st, err
}

// Scale is POST /api/v1/flowlets/{flowlet}/scale.
func (c *Client) Scale(ctx context.Context, flowlet string, n int) (ScaleResponse, error) {
	var r ScaleResponse
	err := c.Do(ctx, http.MethodPost, "/api/v1/flowlets/"+url.PathEscape(flowlet)+"/scale", ScaleRequest{Instances: n}, &r)
	return r, err
}

// IsUnauthorized reports a 401 answer.
func IsUnauthorized(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusUnauthorized
}
