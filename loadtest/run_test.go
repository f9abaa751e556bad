package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/segmentio/encoding/json"
	"github.com/stretchr/testify/require"
)

// fakeQueen is an in-process broker that answers the way the upstream Queen
// server does (section 1 and 4.1 of the Queen wire notes): every answer
// after its database round trip goes out as 200, push verdicts are rendered
// by PostgreSQL (spaces after colons), configure drops the options it does
// not know, and a database error is a 200 with an error object.
type fakeQueen struct {
	pushes atomic.Int64
	// errorEvery makes every n-th push a database error (0: never).
	errorEvery int64
	// push, when set, handles pushes instead (after counting).
	push func(w http.ResponseWriter, r *http.Request, n int64)
}

func (q *fakeQueen) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/health":
		io.WriteString(w, `{"status":"healthy","database":"connected","server":"C++ Queen Server (libqueen)"}`)
	case "/api/v1/configure":
		io.WriteString(w, `{"configured":true,"queue":"loadtest","options":{"leaseTime":300,"retryLimit":3}}`)
	case "/api/v1/resources/queues/loadtest":
		io.WriteString(w, `{"deleted":true,"queue":"loadtest","existed":false}`)
	case "/api/v1/push":
		n := q.pushes.Add(1)
		if q.push != nil {
			q.push(w, r, n)
			return
		}
		if q.errorEvery > 0 && n%q.errorEvery == 0 {
			io.WriteString(w, `{"error": "could not serialize access due to concurrent update"}`)
			return
		}
		var req struct {
			Items []struct {
				TransactionID string `json:"transactionId"`
			} `json:"items"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":"Invalid JSON: %v"}`, err)
			return
		}
		var b bytes.Buffer
		b.WriteString("[")
		for i, it := range req.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, `{"index": %d, "status": "queued", "queueName": "loadtest", "message_id": "0199", "trace_id": null, "transaction_id": %q}`, i+1000, it.TransactionID)
		}
		b.WriteString("]")
		w.Write(b.Bytes())
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, "Not Found")
	}
}

// runLoadtest runs the command with args and returns its exit status, its
// JSON report (when -json was given) and its stderr.
func runLoadtest(t *testing.T, args ...string) (int, *Report, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	var rep *Report
	for i, a := range args {
		if a == "-json" && i+1 < len(args) {
			if b, err := os.ReadFile(args[i+1]); err == nil {
				rep = &Report{}
				require.NoError(t, json.Unmarshal(b, rep), "%s", b)
			}
		}
	}
	return code, rep, stderr.String()
}

// A Queen server answers pushes 200: they count like Regina's 201, by the
// verdicts in the body. Its database errors (200 with an error object) are
// errors, retried like a 5xx. The -json and -plot folders are created.
func TestRunAgainstQueen(t *testing.T) {
	t.Parallel()
	q := &fakeQueen{errorEvery: 2} // the second push already fails: a loaded machine may fit few pushes in 300 ms
	srv := httptest.NewServer(q)
	defer srv.Close()
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "new", "folder", "report.json")
	plotPath := filepath.Join(dir, "other", "plot.png")
	code, rep, stderr := runLoadtest(t, "-url", srv.URL, "-duration", "300ms", "-connections", "2", "-items", "3",
		"-dedup-window", "3600", "-retries", "1", "-max-backoff", "10ms", "-quiet", "-json", jsonPath, "-plot", plotPath)
	require.Equal(t, 0, code, stderr)
	require.NotNil(t, rep)
	_, err := os.Stat(plotPath)
	require.NoError(t, err)

	tot := rep.Totals
	require.Positive(t, tot.Queued)
	require.Equal(t, map[int]int64{200: tot.OKPushes}, tot.OKStatuses, "every verdict answer was a 200")
	require.Equal(t, 3*tot.OKPushes, tot.Queued)
	require.Empty(t, tot.HTTPErrors)
	require.Zero(t, tot.NetworkErrors)
	require.Zero(t, tot.BadAnswers)
	// Every 2nd push was a database error: some retried into success, the
	// rest are counted as errors, never as acknowledged.
	require.Positive(t, tot.Retries)
	require.Equal(t, tot.Items, tot.Queued+tot.ErrorItems)
	require.Equal(t, 3*tot.ErrorBodies, tot.ErrorItems)
	require.Greater(t, rep.MsgsPerSec, 0.0)
	require.Len(t, rep.Notes, 1)
	require.Contains(t, rep.Notes[0], "does not echo it")
	require.Contains(t, stderr, "does not echo it", "said out loud at the start, too")
}

// An output that cannot be written fails the command before the run: not
// one request reaches the broker.
func TestRunFailsBeforeTheRunWhenOutputIsUnwritable(t *testing.T) {
	t.Parallel()
	q := &fakeQueen{}
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		q.ServeHTTP(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	for _, args := range [][]string{
		{"-json", filepath.Join(file, "report.json")}, // a folder cannot be made under a file
		{"-plot", filepath.Join(file, "sub", "plot.png")},
		{"-json", dir}, // a folder is not a file
	} {
		code, _, stderr := runLoadtest(t, append([]string{"-url", srv.URL, "-duration", "1h", "-quiet"}, args...)...)
		require.Equal(t, 1, code, "%v", args)
		require.Contains(t, stderr, args[0], "%v", args)
	}
	require.Zero(t, requests.Load())
}

// A broker that cuts every push's connection: each connection backs off
// instead of spinning, the errors are counted and the run ends normally,
// reporting the broker unreachable until the end.
func TestRunBacksOffWhenConnectionsAreCut(t *testing.T) {
	t.Parallel()
	q := &fakeQueen{push: func(w http.ResponseWriter, r *http.Request, _ int64) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0) // reset, not a clean close
			conn.Close()
		}
	}}
	srv := httptest.NewServer(q)
	defer srv.Close()
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	code, rep, stderr := runLoadtest(t, "-url", srv.URL, "-duration", "1s", "-connections", "4", "-items", "2",
		"-max-backoff", "200ms", "-json", jsonPath)
	require.Equal(t, 0, code, stderr)
	tot := rep.Totals
	require.Positive(t, tot.NetworkErrors)
	require.Equal(t, tot.Pushes, tot.NetworkErrors)
	require.Zero(t, tot.Queued)
	require.Equal(t, tot.Items, tot.ErrorItems)
	// Waits of at least 25, 50, 100, 100, 100 ... ms: within 1 s no
	// connection can make more than 11 attempts (a spinning one makes
	// thousands).
	require.LessOrEqual(t, q.pushes.Load(), int64(4*11))
	require.Equal(t, q.pushes.Load(), tot.Pushes)
	require.NotEmpty(t, rep.Outages)
	require.True(t, rep.Outages[len(rep.Outages)-1].UntilEnd)
	require.Positive(t, rep.UnreachableSeconds)
}

// A broker that vanishes mid-run: what it answered is counted, the refused
// connections after it are errors with a backoff, and the run ends
// normally with the outage in the report.
func TestRunBrokerVanishesMidRun(t *testing.T) {
	t.Parallel()
	var once sync.Once
	var srv *httptest.Server
	gone := make(chan struct{})
	q := &fakeQueen{}
	q.push = func(w http.ResponseWriter, r *http.Request, n int64) {
		// The 5th push, not a later one: a loaded machine may get no
		// more than a few into the run's one second.
		if n == 5 {
			once.Do(func() {
				// Stop listening at once; the connections close once
				// their answers are out.
				srv.Listener.Close()
				go func() { srv.CloseClientConnections(); close(gone) }()
			})
		}
		(&fakeQueen{}).ServeHTTP(w, r)
	}
	srv = httptest.NewServer(q)
	defer func() {
		once.Do(func() { close(gone) }) // never vanished: the checks below say so, the test does not hang
		<-gone
		srv.Close()
	}()
	var stdout, stderr bytes.Buffer
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	code := run([]string{"-url", srv.URL, "-duration", "1s", "-connections", "2", "-items", "5", "-max-backoff", "100ms",
		"-json", jsonPath}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var rep Report
	require.NoError(t, json.Unmarshal(b, &rep))
	tot := rep.Totals
	require.Positive(t, tot.Queued)
	require.LessOrEqual(t, tot.Queued, 5*q.pushes.Load(), "nothing is counted that the broker did not answer")
	require.Positive(t, tot.NetworkErrorKinds[netRefused], "%v", tot.NetworkErrorKinds)
	require.Equal(t, tot.Items, tot.Queued+tot.ErrorItems)
	require.NotEmpty(t, rep.Outages)
	require.True(t, rep.Outages[len(rep.Outages)-1].UntilEnd)
	require.True(t, strings.HasPrefix(strings.TrimSpace(stdout.String()[strings.LastIndex(strings.TrimSpace(stdout.String()), "\n")+1:]), "loadtest: "),
		"the summary line is printed last")
	require.Contains(t, stdout.String(), "still unreachable at the end")
}

// A broker with JWT auth on: -token goes out as a bearer token on every
// request; without it every push is refused with 401, and the connections
// back off instead of hammering it.
func TestRunWithToken(t *testing.T) {
	t.Parallel()
	q := &fakeQueen{}
	var refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" && r.Header.Get("Authorization") != "Bearer s3cret" {
			refused.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":"Authentication required"}`)
			return
		}
		q.ServeHTTP(w, r)
	}))
	defer srv.Close()
	dir := t.TempDir()

	code, rep, stderr := runLoadtest(t, "-url", srv.URL, "-token", "s3cret", "-dedup-window", "60", "-duration", "200ms",
		"-connections", "2", "-quiet", "-json", filepath.Join(dir, "ok.json"))
	require.Equal(t, 0, code, stderr)
	require.Positive(t, rep.Totals.Queued)
	require.Zero(t, rep.Totals.ErrorItems)
	require.Zero(t, refused.Load())

	code, rep, stderr = runLoadtest(t, "-url", srv.URL, "-duration", "1s", "-connections", "2", "-max-backoff", "200ms",
		"-quiet", "-json", filepath.Join(dir, "refused.json"))
	require.Equal(t, 0, code, stderr)
	require.Zero(t, rep.Totals.Queued)
	require.Equal(t, map[int]int64{401: rep.Totals.Pushes}, rep.Totals.HTTPErrors)
	require.Equal(t, "HTTP 401: Authentication required", rep.Totals.LastError)
	// As for cut connections: at most 11 attempts per connection in 1 s.
	require.LessOrEqual(t, refused.Load(), int64(2*11))
}
