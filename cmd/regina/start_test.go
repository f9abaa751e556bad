package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// tcpProxy stands between a broker and its PostgreSQL: while it refuses,
// every connection is closed at once (the database "does not answer");
// while it forwards, connections reach the real server. Refusing again cuts
// every forwarded connection.
type tcpProxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int64
	wg       sync.WaitGroup

	mu      sync.Mutex
	forward bool
	conns   map[net.Conn]bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.setForward(false)
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.mu.Lock()
		on := p.forward
		p.mu.Unlock()
		if !on {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if !p.forward { // turned off meanwhile
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// setForward switches between forwarding and refusing; refusing closes
// every forwarded connection.
func (p *tcpProxy) setForward(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forward = on
	if !on {
		for c := range p.conns {
			_ = c.Close()
		}
	}
}

// url is dbURL with its host and port replaced by the proxy's.
func (p *tcpProxy) url(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Host = p.ln.Addr().String()
	return u.String()
}

// proxyTo returns a refusing proxy in front of the test database and the
// URL that reaches the database through it.
func proxyTo(t *testing.T) (*tcpProxy, string) {
	t.Helper()
	u, err := url.Parse(sqlstoretest.URL(t))
	require.NoError(t, err)
	host := u.Hostname()
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	p := newTCPProxy(t, net.JoinHostPort(host, port))
	return p, p.url(t, u.String())
}

// startingBroker starts a broker and returns as soon as its port is open,
// without waiting for its database; ready receives the address once it
// serves.
func startingBroker(t *testing.T, schema string, mutate func(*Config)) (b *testBroker, ready chan string) {
	t.Helper()
	cfg := brokerConfig(t, schema)
	cfg.connectRetryMax = 100 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	listening := make(chan string, 1)
	cfg.listening = func(addr string) { listening <- addr }
	log := zerolog.Nop()
	if os.Getenv("REGINA_TEST_LOG") != "" {
		log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready = make(chan string, 1)
	b = &testBroker{Schema: schema, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- run(ctx, cfg, log, ready) }()
	select {
	case addr := <-listening:
		b.URL = "http://" + addr
	case err := <-b.done:
		cancel()
		t.Fatalf("broker did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("broker did not listen within 60s")
	}
	t.Cleanup(func() { b.Stop(t) })
	return b, ready
}

// probe sends a GET and decodes the JSON body.
func probe(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	status, body := do(t, "GET", url, nil)
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "body %s", body)
	return status, m
}

// requireRetryable503 checks the answer to a request the broker could not
// serve: 503, a JSON error marked retryable, Retry-After.
func requireRetryable503(t *testing.T, method, url string, body any) {
	t.Helper()
	req := newRequest(t, method, url, body)
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s %s answered %s", method, url, b)
	require.NotEmpty(t, resp.Header.Get("Retry-After"), "Retry-After on %s", b)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "body %s", b)
	require.Equal(t, true, m["retryable"], "body %s", b)
	require.NotEmpty(t, m["error"], "body %s", b)
}

func newRequest(t *testing.T, method, url string, body any) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	return req
}

func TestBrokerListensBeforeItsDatabaseAnswers(t *testing.T) {
	px, dbURL := proxyTo(t)
	schema := sqlstoretest.NewSchema(t)
	b, ready := startingBroker(t, schema, func(c *Config) { c.DatabaseURL = dbURL })

	// The database does not answer: the port does, with "not ready".
	status, h := probe(t, b.URL+"/health")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "unhealthy", h["status"])
	require.Equal(t, "disconnected", h["database"])
	require.Equal(t, "Regina", h["server"], "Queen's /health shape is kept")
	status, r := probe(t, b.URL+"/ready")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, "starting", r["status"])
	status, l := probe(t, b.URL+"/health/live")
	require.Equal(t, http.StatusOK, status, "the process is alive")
	require.Equal(t, "alive", l["status"])
	push := map[string]any{"items": []item{{"queue": "q", "transactionId": "t1", "payload": 1}}}
	requireRetryable503(t, "POST", b.URL+"/api/v1/push", push)
	requireRetryable503(t, "GET", b.URL+"/api/v1/resources/queues", nil)

	// It keeps trying (with backoff), and /ready shows why it is not ready.
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		if px.accepted.Load() < 3 {
			return errNotYet
		}
		return nil
	})
	status, r = probe(t, b.URL+"/ready")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, r["checks"].(map[string]any)["database"].(map[string]any)["error"], "open database")
	select {
	case <-ready:
		t.Fatal("ready before the database answered")
	default:
	}

	// The database answers: the broker connects, migrates and serves.
	px.setForward(true)
	select {
	case <-ready:
	case err := <-b.done:
		t.Fatalf("broker stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("broker not ready 60s after its database answered")
	}
	status, h = probe(t, b.URL+"/health")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "healthy", h["status"])
	status, r = probe(t, b.URL+"/ready")
	require.Equal(t, http.StatusOK, status, "ready: %v", r)
	res := b.push(t, item{"queue": "q", "transactionId": "t1", "payload": 1})
	require.Equal(t, "queued", res[0].Status)
}

func TestShutdownWhileWaitingForTheDatabase(t *testing.T) {
	px, dbURL := proxyTo(t)
	b, _ := startingBroker(t, sqlstoretest.NewSchema(t), func(c *Config) { c.DatabaseURL = dbURL })
	checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
		if px.accepted.Load() < 2 {
			return errNotYet
		}
		return nil
	})
	b.Stop(t) // fails the test unless run returns nil within 60s
	_, err := net.Dial("tcp", b.URL[len("http://"):])
	require.Error(t, err, "the port is closed once stopped")
}
