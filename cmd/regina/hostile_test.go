package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/internal/auth"
	"github.com/regina-mq/regina/wire"
)

// ghostPoll opens a raw connection to b, sends a pop (path and query) and
// returns the connection: the test closes it without reading, as a client
// whose own timeout gave up on a long poll.
func ghostPoll(t *testing.T, b *testBroker, pathQuery string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: regina\r\n\r\n", pathQuery)
	require.NoError(t, err)
	return c
}

// openConnections is the broker's regina_connections_open.
func openConnections(t *testing.T, b *testBroker) float64 {
	t.Helper()
	return scrapeProm(t, b).value("regina_connections_open", nil)
}

// TestGhostLongPollLosesNothing: a long poll whose client is gone ends
// (its connection is closed and uncounted) and never takes a message for
// nobody. Messages pushed right after ghosts left are served to a live
// consumer at once (not after leaseTime); with autoAck exactly once, never
// marked consumed for a ghost.
func TestGhostLongPollLosesNothing(t *testing.T) {
	t.Parallel()
	for _, autoAck := range []bool{false, true} {
		t.Run(fmt.Sprintf("autoAck=%t", autoAck), func(t *testing.T) {
			t.Parallel()
			b := startBroker(t, "", nil)
			d := newDB(t, b.Schema)
			const queue = "ghosts"
			b.configure(t, queue, map[string]any{"leaseTime": 300})
			base := openConnections(t, b)
			query := "?wait=true&timeout=120000"
			if autoAck {
				query += "&autoAck=true"
			}
			const rounds = 5
			for round := range rounds {
				ghosts := make([]net.Conn, 3)
				for i := range ghosts {
					ghosts[i] = ghostPoll(t, b, "/api/v1/pop/queue/"+queue+query)
				}
				// The ghosts' connections are accepted (their polls park or
				// are about to) before they leave.
				checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
					if n := openConnections(t, b); n < base+float64(len(ghosts)) {
						return fmt.Errorf("%v connections open, want %v", n, base+float64(len(ghosts)))
					}
					return nil
				})
				for _, g := range ghosts {
					require.NoError(t, g.Close())
				}
				// Pushed at once: a ghost still parked may take it before
				// its watch sees the client gone; it must give it back.
				tx := fmt.Sprintf("m%d", round)
				b.push(t, item{"queue": queue, "transactionId": tx, "payload": map[string]any{"round": round}})
				params := url.Values{"wait": {"true"}, "timeout": {"10000"}}
				if autoAck {
					params.Set("autoAck", "true")
				}
				got := b.pop(t, queue, "", params)
				require.Len(t, got.Messages, 1, "round %d: the message did not come back within 10s (lease 300s)", round)
				require.Equal(t, tx, got.Messages[0].TransactionID)
				if !autoAck {
					require.True(t, b.ack(t, got.Messages[0], "completed", "").Success)
				}
				// Exactly once: nothing more to pop.
				require.Empty(t, b.pop(t, queue, "", url.Values{"autoAck": {"true"}}).Messages)
			}
			// Every message consumed exactly once, none left leased.
			require.EqualValues(t, rounds, d.int(t, `SELECT cursor_offset FROM queen.consumers`))
			require.Zero(t, d.int(t, `SELECT count(*) FROM queen.consumers WHERE lease_id IS NOT NULL`))
			// The ghosts' connections are all closed.
			checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
				if n := openConnections(t, b); n > base {
					return fmt.Errorf("%v connections open, want %v", n, base)
				}
				return nil
			})
		})
	}
}

// TestAutoAckAnsweredIsConsumed: a live client's autoAck pop is consumed
// by the time its answer arrives (the cursor moves before the broker reads
// the connection's next request), so the next pop on the same connection
// sees the next message.
func TestAutoAckAnsweredIsConsumed(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	const queue = "autoack-live"
	for i := range 3 {
		b.push(t, item{"queue": queue, "partition": "p", "transactionId": fmt.Sprintf("t%d", i), "payload": i})
	}
	for i := range 3 {
		got := b.pop(t, queue, "p", url.Values{"autoAck": {"true"}})
		require.Len(t, got.Messages, 1)
		require.Equal(t, fmt.Sprintf("t%d", i), got.Messages[0].TransactionID)
		require.Empty(t, got.Messages[0].LeaseID)
	}
	status, _ := do(t, "GET", b.URL+"/api/v1/pop/queue/"+queue+"/partition/p?autoAck=true", nil)
	require.Equal(t, http.StatusNoContent, status)
}

// stateDigest counts the rows of every table a request could write, so a
// test can assert that refused requests changed nothing.
func stateDigest(t *testing.T, d *db) string {
	t.Helper()
	var parts []string
	for _, tbl := range []string{"queues", "partitions", "segments", "log_txns", "consumers", "consumer_groups",
		"dlq", "traces"} {
		parts = append(parts, fmt.Sprintf("%s=%d", tbl, d.int(t, `SELECT count(*) FROM queen.`+tbl)))
	}
	parts = append(parts, fmt.Sprintf("cursors=%d", d.int(t, `SELECT coalesce(sum(cursor_offset), 0) FROM queen.consumers`)))
	parts = append(parts, fmt.Sprintf("leases=%d",
		d.int(t, `SELECT count(*) FROM queen.consumers WHERE lease_id IS NOT NULL`)))
	return strings.Join(parts, " ")
}

// refusedAs400 asserts a 400 whose JSON error names field and carries no
// database text.
func refusedAs400(t *testing.T, what string, status int, body []byte, field string) {
	t.Helper()
	require.Equal(t, http.StatusBadRequest, status, "%s: %s", what, body)
	var e struct {
		Error     string `json:"error"`
		Retryable bool   `json:"retryable"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s: %s", what, body)
	require.Contains(t, e.Error, field, "%s: the error does not name the field", what)
	require.False(t, e.Retryable, "%s", what)
	for _, dbText := range []string{"SQLSTATE", "invalid byte sequence", "0x00", "pq:", "ERROR:"} {
		require.NotContains(t, e.Error, dbText, "%s: database text in the answer", what)
	}
}

// TestNULIsABadRequestEverywhere: NUL and invalid UTF-8 in any path
// parameter, any query parameter or any string of a body is a 400 naming
// the field, on every route, and changes nothing; a batch ack with one such
// item fails that item alone.
func TestNULIsABadRequestEverywhere(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	const queue = "nul"
	b.configure(t, queue, map[string]any{"leaseTime": 300})
	for i := range 3 {
		b.push(t, item{"queue": queue, "partition": "p", "transactionId": fmt.Sprintf("ok%d", i), "payload": i})
	}
	popped := b.pop(t, queue, "p", url.Values{"batch": {"3"}}).Messages
	require.Len(t, popped, 3)
	before := stateDigest(t, d)

	// Every route, every parameter: %00 and %FF in the path, in a query
	// parameter's value and in its name.
	for _, r := range wire.Routes() {
		for _, bad := range []string{"a%00b", "a%FFb"} {
			path := r.Pattern
			hasParam := strings.Contains(path, ":")
			for seg := range strings.SplitSeq(r.Pattern, "/") {
				if strings.HasPrefix(seg, ":") {
					path = strings.Replace(path, seg, bad, 1)
				}
			}
			if hasParam {
				status, body := do(t, r.Method, b.URL+path, nil)
				refusedAs400(t, r.Method+" "+path, status, body, "Path parameter")
				// The path cleaned, the same bad value in a query parameter.
				path = strings.ReplaceAll(path, bad, "x")
			}
			status, body := do(t, r.Method, b.URL+path+"?consumerGroup="+bad, nil)
			refusedAs400(t, r.Method+" "+path+"?consumerGroup="+bad, status, body, "consumerGroup")
			status, body = do(t, r.Method, b.URL+path+"?"+bad+"=1", nil)
			refusedAs400(t, r.Method+" "+path+"?"+bad+"=1", status, body, "Query parameter name")
		}
	}
	m := popped[0]
	pid := m.PartitionID
	bodies := []struct {
		method, path, body, field string
	}{
		{"POST", "/api/v1/push", `{"items":[{"queue":"nul","partition":"p","transactionId":"a\u0000b","payload":1}]}`,
			"items[0].transactionId"},
		{"POST", "/api/v1/push", `{"items":[{"queue":"nul","partition":"p\u0000","payload":1}]}`, "items[0].partition"},
		{"POST", "/api/v1/push", `{"items":[{"queue":"n\u0000l","payload":1}]}`, "items[0].queue"},
		{"POST", "/api/v1/ack", `{"transactionId":"a\u0000b","partitionId":"` + pid + `","status":"failed"}`,
			"transactionId"},
		{"POST", "/api/v1/ack", `{"transactionId":"` + m.TransactionID + `","partitionId":"` + pid + `","leaseId":"` +
			m.LeaseID + `","status":"dlq","error":"boom\u0000"}`, "error"},
		{"POST", "/api/v1/ack", `{"transactionId":"` + m.TransactionID + `","partitionId":"` + pid + `","leaseId":"` +
			m.LeaseID + `","consumerGroup":"g\u0000"}`, "consumerGroup"},
		{"POST", "/api/v1/ack/batch", `{"consumerGroup":"g\u0000","acknowledgments":[]}`, "consumerGroup"},
		{"POST", "/api/v1/transaction", `{"operations":[{"type":"push","items":[{"queue":"nul","transactionId":"t\u0000"}]}]}`,
			"operations[0].items[0].transactionId"},
		{"POST", "/api/v1/configure", `{"queue":"q\u0000","options":{}}`, "queue"},
		{"POST", "/api/v1/traces", `{"transactionId":"` + m.TransactionID + `","partitionId":"` + pid +
			`","data":{"ok":"\u0000 is data"},"traceNames":["n\u0000"]}`, "traceNames[0]"},
		{"POST", "/api/v1/traces", `{"transactionId":"` + m.TransactionID + `","partitionId":"` + pid +
			`","data":{},"eventType":"e\u0000"}`, "eventType"},
		{"POST", "/api/v1/dedup/lookup", `{"items":[{"queue":"nul","partition":"p","transactionId":"t\u0000"}]}`,
			"items[0].transactionId"},
		{"POST", "/api/v1/consumer-groups/g/subscription", `{"subscriptionTimestamp":"2026\u0000"}`,
			"subscriptionTimestamp"},
		{"POST", "/streams/v1/queries", `{"name":"s\u0000","source_queue":"nul"}`, "name"},
		{"POST", "/streams/v1/state/get", `{"query_id":"q","partition_id":"p","keys":["k\u0000"]}`, "keys[0]"},
		{"POST", "/api/v1/push", `{"items":[{"queue":"nul","transactionId":"k","payload":1,"x\u0000y":1}]}`,
			`items[0]."x\u0000y"`},
	}
	for _, c := range bodies {
		status, body := do(t, c.method, b.URL+c.path, c.body)
		refusedAs400(t, c.method+" "+c.path+" "+c.body, status, body, c.field)
	}
	require.Equal(t, before, stateDigest(t, d), "a refused request changed something")

	// Names too long for an index (random, so that they do not compress):
	// refused by the database, answered as a 4xx without its words.
	var sb strings.Builder
	for sb.Len() < 4000 {
		fmt.Fprintf(&sb, "%x", rand.Uint64())
	}
	long := sb.String()
	for _, u := range []string{"/api/v1/pop/queue/" + queue + "?consumerGroup=" + long,
		"/api/v1/pop/queue/" + queue + "/partition/" + long, "/api/v1/pop/queue/" + long + "?consumerGroup=x"} {
		status, body := do(t, "GET", b.URL+u, nil)
		require.Less(t, status, 500, "%.100s: %s", u, body)
		require.NotContains(t, string(body), "index row", "%.100s", u)
	}
	// A batch ack with one NUL item: that item fails, its neighbours are
	// acknowledged (the message with the bad item's id is not touched).
	acks := []map[string]any{
		{"transactionId": popped[0].TransactionID, "partitionId": pid, "leaseId": popped[0].LeaseID, "status": "completed"},
		{"transactionId": "bad\x00id", "partitionId": pid, "status": "failed", "error": "x"},
		{"transactionId": popped[1].TransactionID, "partitionId": pid, "leaseId": popped[1].LeaseID, "status": "dlq",
			"error": "fine"},
	}
	status, body := do(t, "POST", b.URL+"/api/v1/ack/batch", map[string]any{"acknowledgments": acks})
	require.Equal(t, http.StatusOK, status, "%s", body)
	var rs []ackResult
	require.NoError(t, json.Unmarshal(body, &rs), "%s", body)
	require.Len(t, rs, 3)
	require.True(t, rs[0].Success, "%s", body)
	require.False(t, rs[1].Success, "%s", body)
	require.Contains(t, *rs[1].Error, "acknowledgments[1].transactionId must not contain NUL", "%s", body)
	require.True(t, rs[2].Success, "%s", body)
	require.EqualValues(t, 1, d.int(t, `SELECT count(*) FROM queen.dlq`))
	// The third message is still leased; the broker still serves.
	require.EqualValues(t, 1, d.int(t, `SELECT count(*) FROM queen.consumers WHERE lease_id IS NOT NULL`))
	b.push(t, item{"queue": queue, "partition": "p", "transactionId": "after", "payload": 1})
}

// TestConnectionFloodKeepsServing: a flood of idle connections from one
// address, far over its cap, is closed as accepted; the broker keeps
// serving a client from another address (push and pop), and the flood's
// address again once it left.
func TestConnectionFloodKeepsServing(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.MaxConnectionsPerIP = 20 })
	addr := strings.TrimPrefix(b.URL, "http://")
	// The flood comes from 127.0.0.5; the test's client from 127.0.0.1.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
	var flood []net.Conn
	closeFlood := func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}
	defer closeFlood()
	for range 300 {
		c, err := d.Dial("tcp", addr)
		require.NoError(t, err)
		flood = append(flood, c)
	}
	// The cap is held, the rest closed by the broker.
	checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := scrapeProm(t, b).value("regina_connections_refused_total",
			map[string]string{"reason": "max_connections_per_ip"}); n != 280 {
			return fmt.Errorf("%v connections refused, want 280", n)
		}
		return nil
	})
	b.push(t, item{"queue": "flood", "transactionId": "t1", "payload": 1})
	require.Len(t, b.pop(t, "flood", "", nil).Messages, 1)
	closeFlood()
	// The flood gone, its address is served again.
	checkFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "GET /health/live HTTP/1.1\r\nHost: regina\r\n\r\n"); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			return fmt.Errorf("answer %q: %w", line, err)
		}
		return nil
	})
	select {
	case err := <-b.done:
		t.Fatalf("the broker stopped: %v", err)
	default:
	}
}

// headersOnly sends a request's line and headers (with extra header lines)
// and the first byte of its body (none when chunked), and returns the
// answer. The answer arriving proves the rest of the body was not waited
// for.
func headersOnly(t *testing.T, b *testBroker, line, headers string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n", line, headers)
	require.NoError(t, err)
	if !strings.Contains(headers, "chunked") {
		_, err = conn.Write([]byte("{"))
		require.NoError(t, err)
	}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, "no answer before the body: the broker waited for it")
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// TestAuthBeforeTheBody: with auth on, a request without a valid token is
// answered 401 from its headers, its announced 100 MB body never read
// beyond its first byte (chunked: not at all); with a valid token, a body
// announced over MAX_BODY_BYTES is 413 from the headers.
func TestAuthBeforeTheBody(t *testing.T) {
	t.Parallel()
	b := startAuthBroker(t, nil)
	for _, c := range []struct{ what, headers string }{
		{"no token", "Content-Length: 100000000\r\n"},
		{"no token, chunked", "Transfer-Encoding: chunked\r\n"},
		{"bad token", "Authorization: Bearer nope\r\nContent-Length: 100000000\r\n"},
	} {
		status, body := headersOnly(t, b, "POST /api/v1/push", c.headers)
		require.Equal(t, http.StatusUnauthorized, status, "%s: %s", c.what, body)
	}
	tok := "Authorization: Bearer " + hsToken(t, "producer", "read-write") + "\r\n"
	status, body := headersOnly(t, b, "POST /api/v1/push", tok+"Content-Length: 100000000\r\n")
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "%s", body)
	// A pushed message with the token still works.
	status, body = rawRequest(t, b, "POST /api/v1/push", strings.TrimSuffix(tok, "\r\n"),
		`{"items":[{"queue":"q","transactionId":"t","payload":1}]}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
}

// TestUnauthenticatedBodyLimit: with auth on, a route served without a
// token (its path added to JWT_SKIP_PATHS) reads at most 64 KiB of body:
// more is 413, less is served.
func TestUnauthenticatedBodyLimit(t *testing.T) {
	t.Parallel()
	b := startAuthBroker(t, func(c *auth.Config) { c.SkipPaths = append(c.SkipPaths, "/api/v1/push") })
	big := fmt.Sprintf(`{"items":[{"queue":"q","transactionId":"big","payload":%q}]}`, strings.Repeat("x", 80<<10))
	status, body := do(t, "POST", b.URL+"/api/v1/push", big)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, "%s", body)
	require.Contains(t, string(body), "65536")
	status, body = do(t, "POST", b.URL+"/api/v1/push", `{"items":[{"queue":"q","transactionId":"small","payload":1}]}`)
	require.Equal(t, http.StatusCreated, status, "%s", body)
}

// TestBodyBudget: while one push holds most of MAX_BODY_BYTES_IN_FLIGHT,
// another large body waits for room and, finding none within the read
// timeout, gets a retryable 503 having changed nothing; once the first
// is done, the same push goes through.
func TestBodyBudget(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	held := make(chan struct{}, 1)
	b := startBroker(t, "", func(c *Config) {
		c.MaxBodyBytes = 1 << 20
		c.MaxBodyBytesInFlight = 3 << 19 // 1.5 MiB
		c.ReadTimeout = time.Second
		c.beforeBatch = func(queue, _ string, _ int) {
			if queue == "held" {
				select {
				case held <- struct{}{}:
				default:
				}
				<-hold
			}
		}
	})
	big := func(queue, tx string) string {
		return fmt.Sprintf(`{"items":[{"queue":%q,"transactionId":%q,"payload":%q}]}`, queue, tx,
			strings.Repeat("x", 900<<10))
	}
	first := make(chan int, 1)
	go func() {
		status, _ := do(t, "POST", b.URL+"/api/v1/push", big("held", "a"))
		first <- status
	}()
	<-held
	status, body := do(t, "POST", b.URL+"/api/v1/push", big("other", "b"))
	require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
	require.Contains(t, string(body), `"retryable":true`)
	require.Contains(t, string(body), "MAX_BODY_BYTES_IN_FLIGHT")
	close(hold)
	require.Equal(t, http.StatusCreated, <-first)
	status, body = do(t, "POST", b.URL+"/api/v1/push", big("other", "b"))
	require.Equal(t, http.StatusCreated, status, "%s", body)
	require.Equal(t, 1.0, scrapeProm(t, b).value("regina_http_body_budget_full_total", nil))
}

// TestShutdownDoesNotWaitForAStuckConnection: a push stuck in PostgreSQL
// (its table locked by another session) holds a pool connection past the
// drain; the broker still stops, leaving the statement to PostgreSQL, where
// pgxpool's Close used to wait for it forever (no statement timeout).
func TestShutdownDoesNotWaitForAStuckConnection(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) {
		c.ShutdownTimeout = 300 * time.Millisecond
		c.StatementTimeout = 0
	})
	d := newDB(t, b.Schema)
	b.push(t, item{"queue": "stuck", "transactionId": "t0", "payload": 1})
	ctx := t.Context()
	tx, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, d.q(`LOCK TABLE queen.segments IN ACCESS EXCLUSIVE MODE`))
	require.NoError(t, err)
	go func() {
		// Answered only once the lock is gone (or not at all).
		c := &http.Client{Timeout: time.Minute}
		if resp, err := c.Post(b.URL+"/api/v1/push", "application/json",
			strings.NewReader(`{"items":[{"queue":"stuck","transactionId":"t1","payload":1}]}`)); err == nil {
			_ = resp.Body.Close()
		}
	}()
	waiting := func() int64 {
		return d.int(t, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'regina'
			AND wait_event_type = 'Lock' AND datname = current_database() AND strpos(query, $1) > 0`, `"`+b.Schema+`".`)
	}
	checkFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if waiting() == 0 {
			return errors.New("the push is not waiting on the lock yet")
		}
		return nil
	})
	b.Stop(t)
	require.NotZero(t, waiting(), "the broker stopped only once its stuck statement ended")
}
