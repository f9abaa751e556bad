package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

func TestBadInputIs400AndWritesNothing(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.MaxBodyBytes = 64 << 10 })
	d := newDB(t, b.Schema)
	long := strings.Repeat("x", 256)
	cases := []struct {
		name, body, want string
	}{
		{"empty body", ``, "Empty request body"},
		{"invalid JSON", `{"items":[{"queue":"q"}`, "Invalid JSON"},
		{"not an object", `[{"queue":"q"}]`, "must be a JSON object"},
		{"missing items", `{"things":[]}`, "items array is required"},
		{"items not an array", `{"items":{"queue":"q"}}`, "items array is required"},
		{"queue missing", `{"items":[{"payload":1}]}`, "queue must be a string"},
		{"queue a number", `{"items":[{"queue":7}]}`, "queue must be a string"},
		{"partition not a string", `{"items":[{"queue":"q","partition":["p"]}]}`, "partition must be a string"},
		{"transactionId not a string", `{"items":[{"queue":"q","transactionId":12}]}`, "transactionId must be a string"},
		{"transactionId over 255", `{"items":[{"queue":"q","transactionId":"` + long + `"}]}`, "transactionId must be at most 255"},
		{"traceId not a UUID", `{"items":[{"queue":"q","traceId":"not-a-uuid"}]}`, "traceId must be a UUID"},
		{"traceId not a string", `{"items":[{"queue":"q","traceId":5}]}`, "traceId must be a string"},
		{"deep nesting", `{"items":[{"queue":"q","payload":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}]}`, "nesting deeper"},
		{"invalid UTF-8", "{\"items\":[{\"queue\":\"q\xff\"}]}", "not valid UTF-8"},
		{"NUL in queue name", `{"items":[{"queue":"q\u0000"}]}`, "NUL"},
		// A bad item anywhere rejects the whole request: the good one before it
		// is not written either.
		{"one bad item among good", `{"items":[{"queue":"q","transactionId":"ok"},{"queue":"q","traceId":"zz"}]}`, "items[1]"},
	}
	for _, tc := range cases {
		status, body := b.pushRaw(t, tc.body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", tc.name, body)
		var e map[string]string
		require.NoError(t, json.Unmarshal(body, &e), "%s: error body must be JSON: %s", tc.name, body)
		require.Contains(t, e["error"], tc.want, tc.name)
	}
	// Over the body limit: 413 with a JSON error. The broker answers from the
	// headers and closes, so send the body on a raw connection and read the
	// answer whether or not it took all of it (an HTTP client may report a
	// broken pipe instead of the response).
	status, body := rawPost(t, b, "/api/v1/push", `{"items":[{"queue":"q","payload":"`+strings.Repeat("a", 70<<10)+`"}]}`)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "%s", body)
	require.Contains(t, string(body), `"error"`)
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.queues`), "bad input created nothing")
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.segments`))

	// The broker still serves after all that.
	require.Equal(t, "queued", b.push(t, item{"queue": "q", "transactionId": strings.Repeat("y", 255), "traceId": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"})[0].Status)
}

func TestPushResponseShape(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	status, body := b.pushRaw(t, `{"items":[]}`)
	require.Equal(t, http.StatusCreated, status)
	require.JSONEq(t, `[]`, string(body))

	trace := "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	res := b.push(t, item{"queue": "q", "payload": map[string]any{"n": 1}, "traceId": trace}, item{"queue": "q", "partition": "x"})
	require.Equal(t, trace, *res[0].TraceID)
	require.Nil(t, res[1].TraceID)
	require.Len(t, res[1].TransactionID, 36, "the broker mints a transaction id when an item has none")
	require.NotEqual(t, res[0].TransactionID, res[1].TransactionID)
	require.Len(t, res[0].MessageID, 36)
	require.Equal(t, byte('7'), res[0].MessageID[14], "message ids are UUIDv7")
	require.NotEqual(t, *res[0].PartitionID, *res[1].PartitionID)

	// The payload is stored byte for byte.
	d := newDB(t, b.Schema)
	var frames []byte
	require.NoError(t, d.pool.QueryRow(context.Background(), d.q(`SELECT frames FROM queen.segments s JOIN queen.partitions p ON p.id = s.partition_id WHERE p.name = 'Default'`)).Scan(&frames))
	require.Contains(t, string(frames), `{"n":1}`)
}

func TestQueueAdmin(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	first := b.push(t, item{"queue": "orders", "partition": "a", "transactionId": "t"}, item{"queue": "orders", "partition": "b"})
	b.configure(t, "other", nil)

	status, body := do(t, "GET", b.URL+"/api/v1/resources/queues", nil)
	require.Equal(t, http.StatusOK, status)
	var list struct {
		Queues []struct {
			Name       string `json:"name"`
			Partitions int    `json:"partitions"`
			Messages   struct {
				Total int `json:"total"`
			} `json:"messages"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list.Queues, 2)
	require.Equal(t, "orders", list.Queues[0].Name)
	require.Equal(t, 2, list.Queues[0].Partitions)
	require.Equal(t, 2, list.Queues[0].Messages.Total)
	require.Equal(t, "other", list.Queues[1].Name)
	require.Equal(t, 1, list.Queues[1].Partitions, "configure creates the Default partition")

	status, body = do(t, "DELETE", b.URL+"/api/v1/resources/queues/orders", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"deleted":true,"queue":"orders","existed":true}`, string(body))
	status, body = do(t, "DELETE", b.URL+"/api/v1/resources/queues/orders", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"deleted":true,"queue":"orders","existed":false}`, string(body))
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.log_txns`))
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.segments`))

	// The live actor of the deleted partition recreates it: the id is new again.
	again := b.push(t, item{"queue": "orders", "partition": "a", "transactionId": "t"})
	require.Equal(t, "queued", again[0].Status)
	require.NotEqual(t, first[0].MessageID, again[0].MessageID)
	require.NotEqual(t, *first[0].PartitionID, *again[0].PartitionID)

	// Percent-encoded names in the path are decoded.
	b.push(t, item{"queue": "a b/c"})
	status, body = do(t, "DELETE", b.URL+"/api/v1/resources/queues/a%20b%2Fc", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"deleted":true,"queue":"a b/c","existed":true}`, string(body))
}

func TestHealthCORSAndRouting(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	status, body := do(t, "GET", b.URL+"/health", nil)
	require.Equal(t, http.StatusOK, status)
	var h map[string]any
	require.NoError(t, json.Unmarshal(body, &h))
	require.Equal(t, "healthy", h["status"])
	require.Equal(t, "connected", h["database"])

	req, _ := http.NewRequest(http.MethodOptions, b.URL+"/api/v1/push", nil)
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "DELETE")
	require.Equal(t, "Content-Type, Authorization", resp.Header.Get("Access-Control-Allow-Headers"))

	resp, err = httpClient.Post(b.URL+"/api/v1/push", "application/json", strings.NewReader(`{"items":[]}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "*", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))

	status, body = do(t, "GET", b.URL+"/api/v1/nope", nil)
	require.Equal(t, http.StatusNotFound, status)
	require.JSONEq(t, `{"error":"Not Found"}`, string(body))
	status, _ = do(t, "GET", b.URL+"/api/v1/push", nil)
	require.Equal(t, http.StatusMethodNotAllowed, status)
}

// proxy forwards TCP connections to target until closed; closing it cuts
// every connection, which looks to the broker like a database going away.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	down  bool
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				c.Close()
				continue
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.setDown(true) })
	return p
}

// setDown cuts every open connection and refuses new ones (true), or lets
// new ones through again (false).
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
	}
}

func TestHealthIs503WhenDatabaseIsUnreachable(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig(sqlstoretest.URL(t))
	require.NoError(t, err)
	px := startProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	u := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", cfg.User, px.ln.Addr(), cfg.Database)
	b := startBroker(t, "", func(c *Config) { c.DatabaseURL = u })
	require.Equal(t, "queued", b.push(t, item{"queue": "q", "transactionId": "before"})[0].Status)

	px.setDown(true)
	status, body := do(t, "GET", b.URL+"/health", nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, string(body), `"status":"unhealthy"`)
	require.Contains(t, string(body), `"database":"disconnected"`)
	status, body = b.pushRaw(t, map[string]any{"items": []item{{"queue": "q", "transactionId": "during"}}})
	require.GreaterOrEqual(t, status, 500, "%s", body)
	require.Contains(t, string(body), `"retryable":true`)

	px.setDown(false)
	checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if s, _ := do(t, "GET", b.URL+"/health", nil); s != http.StatusOK {
			return fmt.Errorf("health %d", s)
		}
		return nil
	})
	// The retry of the failed push is safe; the earlier one is a duplicate.
	require.Equal(t, "queued", b.push(t, item{"queue": "q", "transactionId": "during"})[0].Status)
	require.Equal(t, "duplicate", b.push(t, item{"queue": "q", "transactionId": "before"})[0].Status)
}

// Retention drops a child of the hash sidecar whole once every queue's
// window has passed it: while a queue with a 2-hour window could still need
// 100-minute-old hashes, their child stays (and that queue still answers
// duplicate, the 60 s queue does not); once no window reaches it, it goes.
func TestRetentionPurgesTheSidecar(t *testing.T) {
	t.Parallel()
	// Only the passes below (the broker's own would race them).
	b := startBroker(t, "", func(c *Config) { c.RetentionInterval = 24 * time.Hour })
	d := newDB(t, b.Schema)
	b.configure(t, "short", map[string]any{"dedupWindowSeconds": 60})
	b.configure(t, "long", map[string]any{"dedupWindowSeconds": 7200})
	for i := range 5 {
		b.push(t, item{"queue": "short", "transactionId": strconv.Itoa(i)}, item{"queue": "long", "transactionId": strconv.Itoa(i)})
	}
	d.exec(t, `SELECT queen.sidecar_ensure(now() - interval '2 hours', now(), interval '1 hour')`)
	d.exec(t, `UPDATE queen.log_txns SET created_at = created_at - interval '100 minutes'`)
	st := sqlstoretest.OpenSchema(t, b.Schema)
	stats, err := st.RetainOnce(context.Background(), 2)
	require.NoError(t, err)
	require.Zero(t, stats.SidecarChildren)
	require.Equal(t, int64(10), d.int(t, `SELECT count(*) FROM queen.log_txns`))
	require.Equal(t, "duplicate", b.push(t, item{"queue": "long", "transactionId": "0"})[0].Status)
	require.Equal(t, "queued", b.push(t, item{"queue": "short", "transactionId": "0"})[0].Status)

	b.configure(t, "long", map[string]any{"dedupWindowSeconds": 60})
	stats, err = st.RetainOnce(context.Background(), 2)
	require.NoError(t, err)
	require.GreaterOrEqual(t, stats.SidecarChildren, 1)
	require.Equal(t, int64(0), stats.Segments, "retention is not enabled on these queues")
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.log_txns WHERE created_at < now() - interval '90 minutes'`))
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.log_txns`), "the new push's row stays")
}

// TestBinaryServesWithOnlyDatabaseURLAndPort runs the broker's main as a
// process (brokerProcess) with just those two variables on a database of its
// own, pushes, and stops it with SIGTERM.
func TestBinaryServesWithOnlyDatabaseURLAndPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbName := sqlstoretest.Database(t)
	cfg, err := pgx.ParseConfig(sqlstoretest.URL(t))
	require.NoError(t, err)
	dbURL := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, dbName)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	cmd := brokerProcess(t, "DATABASE_URL="+dbURL, fmt.Sprintf("PORT=%d", port))
	var logs strings.Builder
	cmd.Stderr = &logs
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()

	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	checkFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		s, _, err := tryGet(url + "/health")
		if err != nil || s != http.StatusOK {
			return fmt.Errorf("health: %d %w", s, err)
		}
		return nil
	})
	b := &testBroker{URL: url}
	r1 := b.push(t, item{"queue": "orders", "transactionId": "order:1"})
	r2 := b.push(t, item{"queue": "orders", "transactionId": "order:1"})
	require.Equal(t, "queued", r1[0].Status)
	require.Equal(t, "duplicate", r2[0].Status)
	require.Equal(t, r1[0].MessageID, r2[0].MessageID)

	// The tables are in the default schema "queen".
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM queen.segments`).Scan(&n))
	conn.Close(ctx)
	require.Equal(t, 1, n)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		require.NoError(t, err, "clean exit on SIGTERM; logs:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	require.Contains(t, logs.String(), "regina stopped")
}

func tryGet(url string) (int, []byte, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func TestInvalidConfigNamesTheVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{"PORT": "http"}
	_, err := LoadConfig(nil, func(k string) string { return env[k] }, io.Discard)
	require.ErrorContains(t, err, "PORT")
}

// rawPost sends a POST on its own connection, writing the body in the
// background, and returns the status and body of the answer.
func rawPost(t *testing.T, b *testBroker, path, body string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	go func() {
		_, _ = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			path, len(body), body)
	}()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}
