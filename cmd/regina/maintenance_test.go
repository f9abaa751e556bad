package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

type maintenanceView struct {
	MaintenanceMode    *bool  `json:"maintenanceMode"`
	PopMaintenanceMode *bool  `json:"popMaintenanceMode"`
	BufferedMessages   *int   `json:"bufferedMessages"`
	BufferHealthy      *bool  `json:"bufferHealthy"`
	Message            string `json:"message"`
	BufferStats        *struct {
		PendingCount int  `json:"pendingCount"`
		FailedCount  int  `json:"failedCount"`
		DBHealthy    bool `json:"dbHealthy"`
		FailedFiles  struct {
			TotalMB *float64 `json:"totalMB"`
		} `json:"failedFiles"`
	} `json:"bufferStats"`
}

// maintenance GETs (body nil) or POSTs a maintenance route and requires 200.
func (b *testBroker) maintenance(t *testing.T, path string, body any) maintenanceView {
	t.Helper()
	method := "GET"
	if body != nil {
		method = "POST"
	}
	status, raw := do(t, method, b.URL+"/api/v1/system/maintenance"+path, body)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	var v maintenanceView
	require.NoError(t, json.Unmarshal(raw, &v), "%s", raw)
	require.NotEmpty(t, v.Message)
	return v
}

// cachedMaintenance is what the broker's pushes and pops consult: /health's
// shared_state, from memory.
func (b *testBroker) cachedMaintenance(t *testing.T) (push, pop bool) {
	t.Helper()
	status, raw := do(t, "GET", b.URL+"/health", nil)
	require.Equal(t, http.StatusOK, status, "%s", raw)
	var h struct {
		SharedState struct {
			Push bool `json:"maintenance_mode"`
			Pop  bool `json:"pop_maintenance_mode"`
		} `json:"shared_state"`
	}
	require.NoError(t, json.Unmarshal(raw, &h), "%s", raw)
	return h.SharedState.Push, h.SharedState.Pop
}

// awaitCached waits until the broker has learnt the switches.
func (b *testBroker) awaitCached(t *testing.T, push, pop bool) {
	t.Helper()
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if gp, gq := b.cachedMaintenance(t); gp != push || gq != pop {
			return fmt.Errorf("push %v pop %v: %w", gp, gq, errNotYet)
		}
		return nil
	})
}

// pushRefused posts items and requires the maintenance refusal: 503,
// Retry-After, a retryable JSON error.
func (b *testBroker) pushRefused(t *testing.T, items ...item) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"items": items})
	require.NoError(t, err)
	resp, err := httpClient.Post(b.URL+"/api/v1/push", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", raw)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	var e struct {
		Error           string `json:"error"`
		Retryable       bool   `json:"retryable"`
		MaintenanceMode bool   `json:"maintenanceMode"`
	}
	require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
	require.Contains(t, e.Error, "maintenance")
	require.True(t, e.Retryable)
	require.True(t, e.MaintenanceMode)
}

func slowRefresh(c *Config) { c.MaintenanceRefresh = time.Hour }
func fastRefresh(c *Config) { c.MaintenanceRefresh = 20 * time.Millisecond }

// Push maintenance refuses pushes with a retryable 503 on every broker of
// the database, writes nothing, survives a restart, and once it is off the
// producer's retries (same transaction ids) land exactly once.
func TestPushMaintenance(t *testing.T) {
	t.Parallel()
	schema := sqlstoretest.NewSchema(t)
	// a never refreshes on its own: what it knows, it learnt at start or
	// by its own switching. b2 refreshes often.
	a := startBroker(t, schema, slowRefresh)
	b2 := startBroker(t, schema, fastRefresh)
	d := newDB(t, schema)
	orig := a.push(t, item{"queue": "orders", "partition": "eu", "transactionId": "t-0", "payload": 0})
	require.Equal(t, "queued", orig[0].Status)

	v := a.maintenance(t, "", nil)
	require.False(t, *v.MaintenanceMode)
	require.False(t, *v.PopMaintenanceMode)
	require.Zero(t, *v.BufferedMessages)
	require.True(t, *v.BufferHealthy)
	require.True(t, v.BufferStats.DBHealthy)
	require.Zero(t, *v.BufferStats.FailedFiles.TotalMB)

	// Bad bodies: 400 as upstream words it, nothing switched.
	for _, body := range []string{`{}`, `{"enabled":"true"}`, `{"enabled":1}`, `{"enabled":null}`, `[true]`} {
		status, raw := do(t, "POST", a.URL+"/api/v1/system/maintenance", body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", body, raw)
		if body != `[true]` {
			require.JSONEq(t, `{"error":"enabled (boolean) is required"}`, string(raw))
		}
	}
	status, raw := do(t, "POST", a.URL+"/api/v1/system/maintenance", `{"enabled":`)
	require.Equal(t, http.StatusBadRequest, status, "%s", raw)
	require.Contains(t, string(raw), "Invalid JSON")
	require.False(t, *a.maintenance(t, "", nil).MaintenanceMode)

	v = a.maintenance(t, "", map[string]any{"enabled": true})
	require.True(t, *v.MaintenanceMode)
	require.False(t, *v.PopMaintenanceMode)
	require.Zero(t, *v.BufferedMessages)
	status, raw = do(t, "GET", a.URL+"/metrics/prometheus", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(raw), "\nregina_maintenance_mode{scope=\"push\"} 1\n")
	require.Contains(t, string(raw), "\nregina_maintenance_mode{scope=\"pop\"} 0\n")
	require.Contains(t, string(raw), "\nqueen_maintenance_mode_enabled 1\n")

	// The broker that switched refuses at once; an empty push is still 201
	// [] and bad input still 400.
	a.pushRefused(t, item{"queue": "orders", "partition": "eu", "transactionId": "t-0", "payload": 0},
		item{"queue": "orders", "partition": "eu", "transactionId": "t-1", "payload": 1},
		item{"queue": "orders", "partition": "eu", "transactionId": "t-2", "payload": 2})
	status, raw = a.pushRaw(t, map[string]any{"items": []any{}})
	require.Equal(t, http.StatusCreated, status)
	require.JSONEq(t, `[]`, string(raw))
	status, _ = a.pushRaw(t, map[string]any{"items": []any{map[string]any{"queue": 5}}})
	require.Equal(t, http.StatusBadRequest, status)

	// The other broker reads it fresh on GET, and refuses once it has
	// refreshed (it does not ask the database per push).
	require.True(t, *b2.maintenance(t, "", nil).MaintenanceMode)
	b2.awaitCached(t, true, false)
	b2.pushRefused(t, item{"queue": "orders", "partition": "eu", "transactionId": "t-1", "payload": 1})

	// Only POST /push is refused: a transaction's push lands, as upstream.
	status, txr := a.txn(t, map[string]any{"operations": []map[string]any{{"type": "push",
		"items": []item{{"queue": "side", "transactionId": "tx-1", "payload": 1}}}}})
	require.Equal(t, http.StatusOK, status)
	require.True(t, txr.Success, "%+v", txr)

	// It survives a restart: a broker started now refuses from its first
	// push, without waiting for a refresh.
	a.Stop(t)
	a = startBroker(t, schema, slowRefresh)
	push, pop := a.cachedMaintenance(t)
	require.True(t, push)
	require.False(t, pop)
	a.pushRefused(t, item{"queue": "orders", "partition": "eu", "transactionId": "t-2", "payload": 2})

	// Nothing of the refused pushes was written.
	_, frames, logRows, _, next := d.partitionStats(t, "orders", "eu")
	require.Equal(t, int64(1), frames)
	require.Equal(t, int64(1), logRows)
	require.Equal(t, int64(1), next)

	// Off through the other broker; the producer retries the same ids.
	v = b2.maintenance(t, "", map[string]any{"enabled": false})
	require.False(t, *v.MaintenanceMode)
	b2.awaitCached(t, false, false)
	retry := []item{{"queue": "orders", "partition": "eu", "transactionId": "t-0", "payload": 0},
		{"queue": "orders", "partition": "eu", "transactionId": "t-1", "payload": 1},
		{"queue": "orders", "partition": "eu", "transactionId": "t-2", "payload": 2}}
	first := b2.push(t, retry...)
	require.Equal(t, []string{"duplicate", "queued", "queued"}, []string{first[0].Status, first[1].Status, first[2].Status})
	require.Equal(t, orig[0].MessageID, first[0].MessageID)
	// a learns it too (here by reading the row, as its refresh would).
	require.False(t, *a.maintenance(t, "", nil).MaintenanceMode)
	again := a.push(t, retry...)
	for i, r := range again {
		require.Equal(t, "duplicate", r.Status, "item %d", i)
	}
	require.Equal(t, orig[0].MessageID, again[0].MessageID)
	require.Equal(t, first[1].MessageID, again[1].MessageID)
	require.Equal(t, first[2].MessageID, again[2].MessageID)

	// Each message once, in order.
	got := a.pop(t, "orders", "eu", url.Values{"batch": {"10"}, "autoAck": {"true"}})
	var ids []string
	for _, m := range got.Messages {
		ids = append(ids, m.TransactionID)
	}
	require.Equal(t, []string{"t-0", "t-1", "t-2"}, ids)
	_, frames, _, _, next = d.partitionStats(t, "orders", "eu")
	require.Equal(t, int64(3), frames)
	require.Equal(t, int64(3), next)
}

// Pop maintenance answers every pop 204 with no body and touches no cursor
// or lease; a waiting pop is held until the switch is turned off (through
// any broker) and then delivers; pushes go on meanwhile.
func TestPopMaintenance(t *testing.T) {
	t.Parallel()
	schema := sqlstoretest.NewSchema(t)
	a := startBroker(t, schema, fastRefresh)
	b2 := startBroker(t, schema, fastRefresh)
	d := newDB(t, schema)
	a.push(t, item{"queue": "jobs", "transactionId": "p-0"}, item{"queue": "jobs", "transactionId": "p-1"})

	v := a.maintenance(t, "/pop", nil)
	require.False(t, *v.PopMaintenanceMode)
	require.Nil(t, v.MaintenanceMode)
	for _, body := range []string{`{}`, `{"enabled":"yes"}`} {
		status, raw := do(t, "POST", a.URL+"/api/v1/system/maintenance/pop", body)
		require.Equal(t, http.StatusBadRequest, status, "%s", raw)
		require.JSONEq(t, `{"error":"enabled (boolean) is required"}`, string(raw))
	}
	v = a.maintenance(t, "/pop", map[string]any{"enabled": true})
	require.True(t, *v.PopMaintenanceMode)
	v = a.maintenance(t, "", nil)
	require.True(t, *v.PopMaintenanceMode)
	require.False(t, *v.MaintenanceMode)
	require.True(t, *b2.maintenance(t, "/pop", nil).PopMaintenanceMode)

	// Every pop form answers 204 with no body; a waiting one after its
	// timeout.
	for _, q := range []string{"", "?batch=5", "?consumerGroup=audit", "?wait=true&timeout=100", "?autoAck=true"} {
		for _, u := range []string{"/api/v1/pop/queue/jobs" + q, "/api/v1/pop/queue/jobs/partition/Default" + q} {
			status, raw := do(t, "GET", a.URL+u, nil)
			require.Equal(t, http.StatusNoContent, status, "%s: %s", u, raw)
			require.Empty(t, raw)
		}
	}
	b2.awaitCached(t, false, true)
	status, raw := do(t, "GET", b2.URL+"/api/v1/pop/queue/jobs", nil)
	require.Equal(t, http.StatusNoContent, status, "%s", raw)
	// Bad pop parameters are still 400.
	status, _ = do(t, "GET", a.URL+"/api/v1/pop/queue/jobs?subscriptionFrom=yesterday", nil)
	require.Equal(t, http.StatusBadRequest, status)

	// Pushes go on; no pop left a cursor or a lease.
	require.Equal(t, "queued", a.push(t, item{"queue": "jobs", "transactionId": "p-2"})[0].Status)
	require.Zero(t, d.int(t, `SELECT count(*) FROM queen.consumers`))

	// A waiting pop is answered with messages once pop maintenance ends.
	held := make(chan popResponse, 1)
	go func() {
		held <- a.pop(t, "jobs", "", url.Values{"wait": {"true"}, "timeout": {"30000"}, "batch": {"10"}})
	}()
	require.False(t, *b2.maintenance(t, "/pop", map[string]any{"enabled": false}).PopMaintenanceMode)
	var got popResponse
	select {
	case got = <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the waiting pop was not answered after pop maintenance ended")
	}
	var ids []string
	for _, m := range got.Messages {
		ids = append(ids, m.TransactionID)
	}
	require.Equal(t, []string{"p-0", "p-1", "p-2"}, ids)
}
