package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// runMainEnv, set to 1 in a process's environment, makes this test binary
// run the broker's main instead of the tests (see brokerProcess).
const runMainEnv = "REGINA_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(sqlstoretest.WithPool(m),
		// pgxpool's background health check and fasthttp's worker pool
		// cleaner can outlive a test by a tick.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// brokerProcess is a command that runs the broker's main, as bin/regina
// would, with exactly env (and PATH): this test binary itself, told by
// runMainEnv to be the broker. Tests that signal or kill a broker process
// use it instead of building bin/regina, which would cost every run a link
// of the whole broker.
func brokerProcess(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self)
	cmd.Env = append(slices.Clip(env), runMainEnv+"=1", "PATH="+os.Getenv("PATH"))
	return cmd
}

// testBroker is a broker started in-process by run(), serving on a loopback
// port, on a schema of its own.
type testBroker struct {
	URL    string
	Schema string
	cancel context.CancelFunc
	done   chan error
}

// startBroker starts a broker on schema (one of the test's own, from
// sqlstoretest.Schema, when empty). mutate may
// adjust the configuration before start.
func startBroker(t *testing.T, schema string, mutate func(*Config)) *testBroker {
	t.Helper()
	return startBrokerLog(t, schema, mutate, nil)
}

// syncBuffer is a bytes.Buffer safe for a broker's log writer and a test
// reading it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// startBrokerLog is startBroker with the broker's log (JSON lines, level
// info and up) written to logw when it is not nil.
func startBrokerLog(t *testing.T, schema string, mutate func(*Config), logw io.Writer) *testBroker {
	t.Helper()
	if schema == "" {
		schema = sqlstoretest.Schema(t)
	}
	cfg := brokerConfig(t, schema)
	if mutate != nil {
		mutate(&cfg)
	}
	log := zerolog.Nop()
	if os.Getenv("REGINA_TEST_LOG") != "" {
		log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	if logw != nil {
		log = zerolog.New(logw).Level(zerolog.InfoLevel)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	b := &testBroker{Schema: schema, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- run(ctx, cfg, log, ready) }()
	select {
	case addr := <-ready:
		b.URL = "http://" + addr
	case err := <-b.done:
		cancel()
		t.Fatalf("broker did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("broker did not start within 60s")
	}
	t.Cleanup(func() { b.Stop(t) })
	return b
}

// brokerConfig is the configuration of a test broker on schema: the test
// database, a free loopback port.
func brokerConfig(t *testing.T, schema string) Config {
	t.Helper()
	cfg, err := LoadConfig(nil, func(k string) string {
		switch k {
		case "DATABASE_URL":
			return sqlstoretest.URL(t)
		case "PORT":
			return "0"
		case "HOST":
			return "127.0.0.1"
		case "QUEEN_SCHEMA":
			return schema
		case "DB_POOL_SIZE":
			return "6"
		}
		return ""
	}, io.Discard)
	require.NoError(t, err)
	return cfg
}

// Stop shuts the broker down gracefully and waits for it (idempotent).
func (b *testBroker) Stop(t *testing.T) {
	t.Helper()
	if b.cancel == nil {
		return
	}
	b.cancel()
	b.cancel = nil
	select {
	case err := <-b.done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("broker did not stop within 60s")
	}
}

var httpClient = &http.Client{Timeout: 60 * time.Second}

// do sends a request and returns the status and body.
func do(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		b, err := json.Marshal(v)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// pushResult is one element of a push response.
type pushResult struct {
	Index         int     `json:"index"`
	MessageID     string  `json:"message_id"`
	TransactionID string  `json:"transaction_id"`
	QueueName     string  `json:"queueName"`
	Status        string  `json:"status"`
	PartitionID   *string `json:"partition_id"`
	TraceID       *string `json:"trace_id"`
	Error         string  `json:"error"`
	Retryable     bool    `json:"retryable"`
	// PayloadMismatch: only on queues with dedupPayloadCheck on.
	PayloadMismatch *bool `json:"payloadMismatch"`
}

type item map[string]any

// push posts items and requires a 201 with one result per item.
func (b *testBroker) push(t *testing.T, items ...item) []pushResult {
	t.Helper()
	status, body := do(t, "POST", b.URL+"/api/v1/push", map[string]any{"items": items})
	require.Equal(t, http.StatusCreated, status, "push answered %s", body)
	var res []pushResult
	require.NoError(t, json.Unmarshal(body, &res), "body %s", body)
	require.Len(t, res, len(items))
	for i, r := range res {
		require.Equal(t, i, r.Index)
	}
	return res
}

// pushRaw posts a raw body and returns status and body.
func (b *testBroker) pushRaw(t *testing.T, body any) (int, []byte) {
	t.Helper()
	return do(t, "POST", b.URL+"/api/v1/push", body)
}

// configure posts a configure request and returns the decoded response.
func (b *testBroker) configure(t *testing.T, queue string, options map[string]any) map[string]any {
	t.Helper()
	req := map[string]any{"queue": queue}
	if options != nil {
		req["options"] = options
	}
	status, body := do(t, "POST", b.URL+"/api/v1/configure", req)
	require.Equal(t, http.StatusOK, status, "configure answered %s", body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(body, &out))
	return out
}

// db gives assertions direct access to the broker's tables.
type db struct {
	pool   *pgxpool.Pool
	schema string
}

func newDB(t *testing.T, schema string) *db {
	return &db{pool: sqlstoretest.Pool(t), schema: schema}
}

// q qualifies "queen." table names with the test schema.
func (d *db) q(sql string) string {
	return strings.ReplaceAll(sql, "queen.", pgx.Identifier{d.schema}.Sanitize()+".")
}

func (d *db) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := d.pool.Exec(context.Background(), d.q(sql), args...)
	require.NoError(t, err)
}

func (d *db) int(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, d.pool.QueryRow(context.Background(), d.q(sql), args...).Scan(&n))
	return n
}

func (d *db) int64s(t *testing.T, sql string, args ...any) []int64 {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), d.q(sql), args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return out
}

// partitionStats returns (segments, frames, log_txns rows, hashes, next_offset)
// of one partition, zeros when it does not exist.
func (d *db) partitionStats(t *testing.T, queue, part string) (segments, frames, logRows, hashes, nextOffset int64) {
	t.Helper()
	err := d.pool.QueryRow(context.Background(), d.q(`
		SELECT (SELECT count(*) FROM queen.segments s WHERE s.partition_id = p.id),
		       (SELECT coalesce(sum(frame_count), 0) FROM queen.segments s WHERE s.partition_id = p.id),
		       (SELECT count(*) FROM queen.log_txns l WHERE l.partition_id = p.id),
		       (SELECT coalesce(sum(cardinality(hashes)), 0) FROM queen.log_txns l WHERE l.partition_id = p.id),
		       p.next_offset
		  FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		 WHERE q.name = $1 AND p.name = $2`), queue, part).Scan(&segments, &frames, &logRows, &hashes, &nextOffset)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, 0, 0, 0
	}
	require.NoError(t, err)
	return
}

// checkFor polls cond every `every` until it returns nil or total elapses.
func checkFor(t *testing.T, total, every time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", total, err)
		}
		time.Sleep(every)
	}
}

var errNotYet = errors.New("not yet")
