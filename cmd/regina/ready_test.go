package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

// readyChecks returns /ready's status and its checks.
func readyChecks(t *testing.T, b *testBroker) (int, map[string]map[string]any) {
	t.Helper()
	status, body := do(t, "GET", b.URL+"/ready", nil)
	var r struct {
		Status string                    `json:"status"`
		Checks map[string]map[string]any `json:"checks"`
	}
	require.NoError(t, json.Unmarshal(body, &r), "body %s", body)
	return status, r.Checks
}

func TestReadinessReportsMailboxPressure(t *testing.T) {
	t.Parallel()
	hook, release, first := holdActors()
	defer release()
	b := startBroker(t, "", func(c *Config) {
		c.beforeBatch = hook
		c.MailboxMaxItems = 2
	})

	status, checks := readyChecks(t, b)
	require.Equal(t, http.StatusOK, status, "checks %v", checks)
	require.Equal(t, true, checks["database"]["ok"])
	require.Equal(t, true, checks["migrations"]["ok"])
	require.Positive(t, checks["migrations"]["version"])
	require.Equal(t, checks["migrations"]["expected"], checks["migrations"]["version"])
	require.Equal(t, true, checks["mailboxes"]["ok"])

	// One push is held in its batch, a second of two items fills the
	// mailbox (bound 2): the broker is not ready, though alive and healthy.
	var wg sync.WaitGroup
	send := func(items ...item) {
		wg.Go(func() {
			if status, body := b.pushRaw(t, map[string]any{"items": items}); status != http.StatusCreated {
				t.Errorf("push: %d %s", status, body)
			}
		})
	}
	send(item{"queue": "held", "transactionId": "a"})
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if first.Load() == 0 {
			return errNotYet
		}
		return nil
	})
	send(item{"queue": "held", "transactionId": "b"}, item{"queue": "held", "transactionId": "c"})
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		if status, _ := readyChecks(t, b); status != http.StatusServiceUnavailable {
			return errNotYet
		}
		return nil
	})
	_, checks = readyChecks(t, b)
	require.Equal(t, false, checks["mailboxes"]["ok"])
	require.InDelta(t, 1, checks["mailboxes"]["full"], 0)
	require.InDelta(t, 1.0, checks["mailboxes"]["fullest"], 0.001)
	require.NotEmpty(t, checks["mailboxes"]["error"])
	require.Equal(t, true, checks["database"]["ok"])
	status, _ = do(t, "GET", b.URL+"/health", nil)
	require.Equal(t, http.StatusOK, status, "a full mailbox is not a liveness problem")

	release()
	wg.Wait()
	status, checks = readyChecks(t, b)
	require.Equal(t, http.StatusOK, status, "checks %v", checks)
}

// One hot partition at its bound is that partition's back-pressure, not the
// broker's: /ready stays 200 while fewer than half the live mailboxes are
// full, and answers 503 once half of them are.
func TestReadinessToleratesOneHotPartition(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer release()
	var held sync.Map // queues whose first batch is being held
	b := startBroker(t, "", func(c *Config) {
		c.beforeBatch = func(q, _ string, _ int) {
			if strings.HasPrefix(q, "hot") {
				held.Store(q, true)
				<-gate
			}
		}
		c.MailboxMaxItems = 2
		c.ActorIdle = time.Hour // the free actors stay live for the count
	})
	b.push(t, item{"queue": "free1", "transactionId": "x"})
	b.push(t, item{"queue": "free2", "transactionId": "x"})

	var wg sync.WaitGroup
	fill := func(q string) {
		wg.Go(func() {
			if status, body := b.pushRaw(t, map[string]any{"items": []item{{"queue": q, "transactionId": "a"}}}); status != http.StatusCreated {
				t.Errorf("push %s: %d %s", q, status, body)
			}
		})
		checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
			if _, ok := held.Load(q); !ok {
				return errNotYet
			}
			return nil
		})
		wg.Go(func() {
			items := []item{{"queue": q, "transactionId": "b"}, {"queue": q, "transactionId": "c"}}
			if status, body := b.pushRaw(t, map[string]any{"items": items}); status != http.StatusCreated {
				t.Errorf("push %s: %d %s", q, status, body)
			}
		})
	}
	awaitFull := func(n float64) (int, map[string]map[string]any) {
		var status int
		var checks map[string]map[string]any
		checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
			status, checks = readyChecks(t, b)
			if checks["mailboxes"]["full"] != n {
				return errNotYet
			}
			return nil
		})
		return status, checks
	}

	fill("hot1")
	status, checks := awaitFull(1)
	require.Equal(t, http.StatusOK, status, "one full mailbox of three: checks %v", checks)
	require.Equal(t, true, checks["mailboxes"]["ok"])
	require.InDelta(t, 3, checks["mailboxes"]["actors"], 0)

	fill("hot2")
	status, checks = awaitFull(2)
	require.Equal(t, http.StatusServiceUnavailable, status, "two full mailboxes of four: checks %v", checks)
	require.Equal(t, false, checks["mailboxes"]["ok"])
	require.InDelta(t, 4, checks["mailboxes"]["actors"], 0)
	require.Contains(t, checks["mailboxes"]["error"], "2 of 4")

	release()
	wg.Wait()
	status, checks = readyChecks(t, b)
	require.Equal(t, http.StatusOK, status, "checks %v", checks)
}

func TestDatabaseOutageAnswersRetryable503(t *testing.T) {
	t.Parallel()
	px, dbURL := proxyTo(t)
	px.setForward(true)
	b := startBroker(t, "", func(c *Config) { c.DatabaseURL = dbURL })
	first := b.push(t, item{"queue": "q", "transactionId": "before"})
	require.Equal(t, "queued", first[0].Status)

	// The database goes away: every connection is cut, none can be made.
	px.setForward(false)
	push := map[string]any{"items": []item{{"queue": "q", "transactionId": "during"}}}
	for range 3 {
		requireRetryable503(t, "POST", b.URL+"/api/v1/push", push)
	}
	requireRetryable503(t, "GET", b.URL+"/api/v1/resources/queues", nil)
	status, checks := readyChecks(t, b)
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Equal(t, false, checks["database"]["ok"])
	require.NotEmpty(t, checks["database"]["error"])
	status, _ = do(t, "GET", b.URL+"/health", nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	status, _ = do(t, "GET", b.URL+"/health/live", nil)
	require.Equal(t, http.StatusOK, status)

	// It comes back: the broker reconnects by itself, and a retry of what
	// was stored before is still a duplicate of it.
	px.setForward(true)
	awaitPush(t, b, item{"queue": "q", "transactionId": "during"})
	again := b.push(t, item{"queue": "q", "transactionId": "before"})
	require.Equal(t, "duplicate", again[0].Status)
	require.Equal(t, first[0].MessageID, again[0].MessageID)
	status, checks = readyChecks(t, b)
	require.Equal(t, http.StatusOK, status, "checks %v", checks)
}

// awaitPush pushes it until the broker answers 201; every other answer
// must be a retryable 503.
func awaitPush(t *testing.T, b *testBroker, it item) []pushResult {
	t.Helper()
	var res []pushResult
	checkFor(t, 60*time.Second, 50*time.Millisecond, func() error {
		status, body := b.pushRaw(t, map[string]any{"items": []item{it}})
		if status == http.StatusCreated {
			require.NoError(t, json.Unmarshal(body, &res))
			return nil
		}
		require.Equal(t, http.StatusServiceUnavailable, status, "push answered %s", body)
		require.Contains(t, string(body), `"retryable":true`)
		return fmt.Errorf("push answered %d %s", status, body)
	})
	return res
}

var readOnlyError = regexp.MustCompile(`read[- ]only`)

// A read-only server (a standby, or default_transaction_read_only) is "no
// primary": every request answers a retryable 503 and nothing is written;
// once it is writable again the broker serves without a restart. With
// target_session_attrs=any the broker's sessions reach the server and fail
// with SQLSTATE 25006 (each such connection is dropped); by default Regina
// asks for read-write sessions and the server is refused at connect.
func TestReadOnlyDatabaseIsNoPrimary(t *testing.T) {
	t.Parallel()
	admin := sqlstoretest.Pool(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, attrs string }{
		{"read-write sessions (default)", ""},
		{"target_session_attrs=any (25006)", "any"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbName := sqlstoretest.Database(t)
			u, err := url.Parse(sqlstoretest.URL(t))
			require.NoError(t, err)
			u.Path = "/" + dbName
			if tc.attrs != "" {
				q := u.Query()
				q.Set("target_session_attrs", tc.attrs)
				u.RawQuery = q.Encode()
			}
			b := startBroker(t, "queen", func(c *Config) { c.DatabaseURL = u.String() })
			first := b.push(t, item{"queue": "q", "transactionId": "before"})
			require.Equal(t, "queued", first[0].Status)

			setReadOnly := func(on bool) {
				t.Helper()
				stmt := "ALTER DATABASE " + pgx.Identifier{dbName}.Sanitize() + " SET default_transaction_read_only = on"
				if !on {
					stmt = "ALTER DATABASE " + pgx.Identifier{dbName}.Sanitize() + " RESET default_transaction_read_only"
				}
				_, err := admin.Exec(ctx, stmt)
				require.NoError(t, err)
			}
			// Read-only from the next session on; the broker's sessions end
			// (as they do when a primary goes down and comes back a standby).
			// A session that began before the ALTER stays writable, one the
			// pool was opening meanwhile too: end every such session until
			// none is left.
			setReadOnly(true)
			var since time.Time
			require.NoError(t, admin.QueryRow(ctx, "SELECT now()").Scan(&since))
			checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
				var old int
				if err := admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE datname = $1 AND backend_start <= $2`, dbName, since).Scan(&old); err != nil {
					return err
				}
				if old > 0 {
					return fmt.Errorf("%d sessions from before the ALTER", old)
				}
				return nil
			})
			checkFor(t, 60*time.Second, 20*time.Millisecond, func() error {
				status, checks := readyChecks(t, b)
				if status == http.StatusServiceUnavailable && readOnlyError.MatchString(fmt.Sprint(checks["database"]["error"])) {
					return nil
				}
				return fmt.Errorf("/ready %d %v", status, checks)
			})
			push := map[string]any{"items": []item{{"queue": "q", "transactionId": "during"}}}
			for range 4 {
				requireRetryable503(t, "POST", b.URL+"/api/v1/push", push)
			}

			// Writable again: the broker serves without a restart.
			setReadOnly(false)
			res := awaitPush(t, b, item{"queue": "q", "transactionId": "during"})
			require.Equal(t, "queued", res[0].Status, "nothing of it was written while read-only")
			again := b.push(t, item{"queue": "q", "transactionId": "before"})
			require.Equal(t, "duplicate", again[0].Status)
			require.Equal(t, first[0].MessageID, again[0].MessageID)
			status, checks := readyChecks(t, b)
			require.Equal(t, http.StatusOK, status, "checks %v", checks)
		})
	}
}

// A push whose backend the server ends (57P01, admin shutdown: what a
// primary going down does to its sessions) answers a retryable 503 "outcome
// unknown", never a verdict; its retry gets the right one.
func TestPushCutOffByAdminShutdownIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	first := b.push(t, item{"queue": "q", "partition": "p", "transactionId": "first"})
	require.NotNil(t, first[0].PartitionID)

	// Hold the partition's row lock, so the next push waits inside
	// push_segment, then end that backend.
	tx, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) // a no-op after the explicit one
	_, err = tx.Exec(ctx, d.q(`SELECT 1 FROM queen.partitions WHERE id = $1 FOR UPDATE`), *first[0].PartitionID)
	require.NoError(t, err)
	type answer struct {
		status int
		body   []byte
	}
	answered := make(chan answer, 1)
	go func() {
		status, body := b.pushRaw(t, map[string]any{"items": []item{{"queue": "q", "partition": "p", "transactionId": "cut"}}})
		answered <- answer{status, body}
	}()
	pattern := "%" + b.Schema + "%push_segment%"
	checkFor(t, 30*time.Second, 5*time.Millisecond, func() error {
		var n int64
		if err := d.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'regina' AND wait_event_type = 'Lock' AND query LIKE $1`, pattern).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return errNotYet
		}
		return nil
	})
	a := <-answered
	require.Equal(t, http.StatusServiceUnavailable, a.status, "answered %s", a.body)
	require.Contains(t, string(a.body), "Outcome unknown")
	require.Contains(t, string(a.body), `"retryable":true`)
	require.NoError(t, tx.Rollback(ctx))

	// The retry gets the verdict: here nothing had committed.
	res := b.push(t, item{"queue": "q", "partition": "p", "transactionId": "cut"})
	require.Equal(t, "queued", res[0].Status)
	res2 := b.push(t, item{"queue": "q", "partition": "p", "transactionId": "cut"})
	require.Equal(t, "duplicate", res2[0].Status)
	require.Equal(t, res[0].MessageID, res2[0].MessageID)
}
