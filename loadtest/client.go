package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
)

// Client talks to the broker over one keep-alive connection. The load
// generator is an outside client: these are its own request and response
// shapes, not the broker's.
type Client struct {
	hc      *fasthttp.HostClient
	scheme  string
	host    string
	timeout time.Duration
}

// NewClient makes a client for the broker at rawURL holding at most one
// connection, kept alive between requests.
func NewClient(rawURL string, timeout time.Duration) (*Client, error) {
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
	}, nil
}

// PushOutcome is what one push attempt got back.
type PushOutcome struct {
	// Status is the HTTP status, 0 for a network error.
	Status int
	// Err is the network error, or the error message of a non-201 answer,
	// or a malformed 201 answer.
	Err error
	// Item verdicts of a 201 answer.
	Queued, Duplicate, Failed int
}

// Retryable reports whether the attempt may be resent as is: a network
// error or a 5xx answer.
func (o *PushOutcome) Retryable() bool { return o.Status == 0 || o.Status >= 500 }

// OK reports a 201 answer that was understood.
func (o *PushOutcome) OK() bool { return o.Status == fasthttp.StatusCreated && o.Err == nil }

type pushResultItem struct {
	Status string `json:"status"`
}

type errorBody struct {
	Error string `json:"error"`
}

func (c *Client) do(method, path string, body []byte, req *fasthttp.Request, resp *fasthttp.Response) error {
	req.Header.SetMethod(method)
	req.SetRequestURI(c.scheme + "://" + c.host + path)
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	return c.hc.DoTimeout(req, resp, c.timeout)
}

// Push sends one push body holding nItems items and classifies the answer.
func (c *Client) Push(body []byte, nItems int) PushOutcome {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	if err := c.do(fasthttp.MethodPost, "/api/v1/push", body, req, resp); err != nil {
		return PushOutcome{Err: err}
	}
	return classifyPush(resp.StatusCode(), resp.Body(), nItems)
}

// classifyPush turns a push answer into an outcome.
func classifyPush(status int, body []byte, nItems int) PushOutcome {
	out := PushOutcome{Status: status}
	if status != fasthttp.StatusCreated {
		out.Err = errors.New(errorMessage(status, body))
		return out
	}
	var items []pushResultItem
	if err := json.Unmarshal(body, &items); err != nil {
		out.Err = fmt.Errorf("bad 201 body: %w", err)
		return out
	}
	if len(items) != nItems {
		out.Err = fmt.Errorf("201 with %d results for %d items", len(items), nItems)
	}
	for _, it := range items {
		switch it.Status {
		case "queued":
			out.Queued++
		case "duplicate":
			out.Duplicate++
		default:
			out.Failed++
		}
	}
	return out
}

func errorMessage(status int, body []byte) string {
	var eb errorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != "" {
		return fmt.Sprintf("HTTP %d: %s", status, eb.Error)
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return fmt.Sprintf("HTTP %d: %s", status, s)
}

// admin sends a small request and fails on any status outside okStatuses.
func (c *Client) admin(method, path string, body []byte, okStatuses ...int) (int, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	if err := c.do(method, path, body, req, resp); err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	st := resp.StatusCode()
	for _, ok := range okStatuses {
		if st == ok {
			return st, nil
		}
	}
	return st, fmt.Errorf("%s %s: %s", method, path, errorMessage(st, resp.Body()))
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

// Configure sets the queue's dedup window in seconds (0 turns dedup off).
// The broker treats configure as a full replace: other options go back to
// their defaults.
func (c *Client) Configure(queue string, dedupWindowSeconds int) error {
	body, err := json.Marshal(configureReq{Queue: queue, Options: configureOptions{DedupWindowSeconds: dedupWindowSeconds}})
	if err != nil {
		return err
	}
	_, err = c.admin(fasthttp.MethodPost, "/api/v1/configure", body, 200, 201)
	return err
}

// DeleteQueue deletes the queue; a queue that does not exist is fine.
func (c *Client) DeleteQueue(queue string) error {
	_, err := c.admin(fasthttp.MethodDelete, "/api/v1/resources/queues/"+url.PathEscape(queue), nil, 200, 202, 204, 404)
	return err
}

// Close drops the client's idle connection.
func (c *Client) Close() { c.hc.CloseIdleConnections() }
