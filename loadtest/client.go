package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/internal/pushanswer"
)

// Client talks to the broker over one keep-alive connection. The load
// generator is an outside client: these are its own request and response
// shapes, not the broker's.
type Client struct {
	hc      *fasthttp.HostClient
	scheme  string
	host    string
	timeout time.Duration
	// auth is the Authorization header value, "" for none.
	auth string
}

// NewClient makes a client for the broker at rawURL holding at most one
// connection, kept alive between requests. A token is sent on every request
// as "Authorization: Bearer <token>" (for a broker with JWT auth on).
func NewClient(rawURL, token string, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bad -url %q: %w", rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("bad -url %q: scheme must be http or https", rawURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("bad -url %q: no host", rawURL)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(u.Hostname(), port)
	}
	return &Client{
		hc: &fasthttp.HostClient{
			Addr:                          addr,
			IsTLS:                         u.Scheme == "https",
			MaxConns:                      1,
			MaxConnWaitTimeout:            timeout,
			ReadTimeout:                   timeout,
			WriteTimeout:                  timeout,
			MaxIdleConnDuration:           time.Minute,
			DisableHeaderNamesNormalizing: true,
			NoDefaultUserAgentHeader:      true,
			ReadBufferSize:                16 << 10,
		},
		scheme:  u.Scheme,
		host:    u.Host,
		timeout: timeout,
		auth:    bearer(token),
	}, nil
}

// PushOutcome is what one push attempt got back, judged the same way for
// Regina and upstream Queen (any 2xx; the body decides).
type PushOutcome = pushanswer.Answer

func (c *Client) do(method, path string, body []byte, req *fasthttp.Request, resp *fasthttp.Response) error {
	req.Header.SetMethod(method)
	req.SetRequestURI(c.scheme + "://" + c.host + path)
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	return c.hc.DoTimeout(req, resp, c.timeout)
}

func bearer(token string) string {
	if token == "" {
		return ""
	}
	return "Bearer " + token
}

// Push sends one push body holding nItems items and judges the answer.
func (c *Client) Push(body []byte, nItems int) PushOutcome {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	if err := c.do(fasthttp.MethodPost, "/api/v1/push", body, req, resp); err != nil {
		return pushanswer.Failure(err)
	}
	return pushanswer.Read(resp.StatusCode(), resp.Body(), nItems)
}

// Network error kinds, as the report names them.
const (
	netRefused = "connection refused"
	netReset   = "connection reset"
	netClosed  = "closed before an answer"
	netTimeout = "timeout"
	netOther   = "other"
)

// netErrorKind names what happened to a request that got no answer.
func netErrorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return netRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return netReset
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return netClosed
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return netTimeout
	}
	return netOther
}

// admin sends a small request and fails on any status outside okStatuses,
// and on a 2xx answer carrying an error object (upstream Queen sends its
// database errors as 200). It returns the answer's body.
func (c *Client) admin(method, path string, body []byte, okStatuses ...int) ([]byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	if err := c.do(method, path, body, req, resp); err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	st := resp.StatusCode()
	if !slices.Contains(okStatuses, st) {
		return nil, fmt.Errorf("%s %s: %s", method, path, pushanswer.ErrorMessage(st, resp.Body()))
	}
	if msg := pushanswer.ErrorInBody(resp.Body()); msg != "" && st/100 == 2 {
		return nil, fmt.Errorf("%s %s: HTTP %d with an error body: %s", method, path, st, msg)
	}
	return bytes.Clone(resp.Body()), nil
}

// BrokerCounts reads the goroutines and partition actors from a Regina
// broker's GET /metrics (cpu.goroutines, actors); ok is false when the
// broker does not report them.
func (c *Client) BrokerCounts() (goroutines, actors int, ok bool) {
	b, err := c.admin(fasthttp.MethodGet, "/metrics", nil, 200)
	if err != nil {
		return 0, 0, false
	}
	var m struct {
		CPU struct {
			Goroutines *int `json:"goroutines"`
		} `json:"cpu"`
		Actors *int `json:"actors"`
	}
	if json.Unmarshal(b, &m) != nil || m.CPU.Goroutines == nil || m.Actors == nil {
		return 0, 0, false
	}
	return *m.CPU.Goroutines, *m.Actors, true
}

// Health checks GET /health answers 2xx.
func (c *Client) Health() error {
	_, err := c.admin(fasthttp.MethodGet, "/health", nil, 200, 204)
	return err
}

type configureReq struct {
	Queue   string           `json:"queue"`
	Options configureOptions `json:"options"`
}

type configureOptions struct {
	DedupWindowSeconds int `json:"dedupWindowSeconds"`
}

type configureResp struct {
	Options struct {
		DedupWindowSeconds *int `json:"dedupWindowSeconds"`
	} `json:"options"`
}

// Configure sets the queue's dedup window in seconds (0 turns dedup off).
// The broker treats configure as a full replace: other options go back to
// their defaults. It returns a note when the answer does not echo the
// window it was given: upstream Queen drops the option it does not know
// (its deduplication has no window), and a run must say so.
func (c *Client) Configure(queue string, dedupWindowSeconds int) (note string, err error) {
	body, err := json.Marshal(configureReq{Queue: queue, Options: configureOptions{DedupWindowSeconds: dedupWindowSeconds}})
	if err != nil {
		return "", err
	}
	ans, err := c.admin(fasthttp.MethodPost, "/api/v1/configure", body, 200, 201)
	if err != nil {
		return "", err
	}
	var cr configureResp
	switch err := json.Unmarshal(ans, &cr); {
	case err != nil:
		return fmt.Sprintf("dedupWindowSeconds %d sent; the configure answer could not be read (%v), so whether the broker took it is unknown", dedupWindowSeconds, err), nil
	case cr.Options.DedupWindowSeconds == nil:
		return fmt.Sprintf("dedupWindowSeconds %d sent, but the broker's answer does not echo it: it ignores the option "+
			"(upstream Queen does: its deduplication has no window and cannot be turned off)", dedupWindowSeconds), nil
	case *cr.Options.DedupWindowSeconds != dedupWindowSeconds:
		return fmt.Sprintf("dedupWindowSeconds %d sent, but the broker answered %d", dedupWindowSeconds, *cr.Options.DedupWindowSeconds), nil
	}
	return "", nil
}

// DeleteQueue deletes the queue; a queue that does not exist is fine.
func (c *Client) DeleteQueue(queue string) error {
	_, err := c.admin(fasthttp.MethodDelete, "/api/v1/resources/queues/"+url.PathEscape(queue), nil, 200, 202, 204, 404)
	return err
}

// Close drops the client's idle connection.
func (c *Client) Close() { c.hc.CloseIdleConnections() }
