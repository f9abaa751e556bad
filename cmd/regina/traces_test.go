package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

type traceEvent struct {
	ID             string           `json:"id"`
	TransactionID  string           `json:"transaction_id"`
	PartitionID    string           `json:"partition_id"`
	EventType      string           `json:"event_type"`
	Data           json.RawMessage  `json:"data"`
	ConsumerGroup  string           `json:"consumer_group"`
	WorkerID       string           `json:"worker_id"`
	CreatedAt      string           `json:"created_at"`
	QueueName      string           `json:"queue_name"`
	PartitionName  string           `json:"partition_name"`
	MessagePayload *json.RawMessage `json:"message_payload"`
	TraceNames     []string         `json:"trace_names"`
}

type traceList struct {
	Traces     []traceEvent `json:"traces"`
	Total      int64        `json:"total"`
	Pagination struct {
		Limit  int `json:"limit"`
		Offset int `json:"offset"`
	} `json:"pagination"`
}

type traceNameList struct {
	TraceNames []struct {
		TraceName    string `json:"trace_name"`
		TraceCount   int64  `json:"trace_count"`
		MessageCount int64  `json:"message_count"`
		LastSeen     string `json:"last_seen"`
	} `json:"trace_names"`
	Total int64 `json:"total"`
}

// trace posts a trace event and returns the status and the decoded answer.
func (b *testBroker) trace(t *testing.T, body any) (int, map[string]any) {
	t.Helper()
	status, raw := do(t, "POST", b.URL+"/api/v1/traces", body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return status, out
}

//nolint:tparallel // the subtests read one state in order
func TestTraces(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	sent := b.push(t, item{"queue": "orders", "partition": "eu", "transactionId": "order-42", "payload": map[string]any{"total": 12}},
		item{"queue": "orders", "partition": "eu", "transactionId": "order-43", "payload": "second"})
	pid := *sent[0].PartitionID

	// Recorded on a stored message, consumed or not, with the defaults.
	status, out := b.trace(t, map[string]any{"transactionId": "order-42", "partitionId": pid,
		"data": map[string]any{"text": "validated"}, "traceNames": []any{"tenant-acme", "order-42", "tenant-acme", 7}})
	require.Equal(t, http.StatusCreated, status, "%v", out)
	require.Equal(t, true, out["success"])
	first := out["traceId"].(string)
	require.Len(t, first, 36)
	status, out = b.trace(t, map[string]any{"transactionId": "order-42", "partitionId": pid, "data": nil,
		"consumerGroup": "billing", "eventType": "step", "traceNames": "order-42"})
	require.Equal(t, http.StatusCreated, status, "%v", out)
	second := out["traceId"].(string)
	status, _ = b.trace(t, map[string]any{"transactionId": "order-43", "partitionId": pid, "data": map[string]any{"n": 1},
		"traceNames": []string{"tenant-acme"}})
	require.Equal(t, http.StatusCreated, status)

	t.Run("bad input changes nothing", func(t *testing.T) {
		before := d.int(t, `SELECT count(*) FROM queen.traces`)
		for _, c := range []struct {
			body any
			want string
		}{
			{map[string]any{"partitionId": pid, "data": 1}, "transactionId and partitionId are required"},
			{map[string]any{"transactionId": "order-42", "data": 1}, "transactionId and partitionId are required"},
			{map[string]any{"transactionId": "order-42", "partitionId": pid}, "data is required"},
			{map[string]any{"transactionId": "order-42", "partitionId": "nope", "data": 1}, "partitionId must be a UUID"},
			{map[string]any{"transactionId": 5, "partitionId": pid, "data": 1}, "transactionId must be a string"},
			{map[string]any{"transactionId": "order-42", "partitionId": pid, "data": 1, "eventType": strings.Repeat("e", 101)},
				"eventType must be at most 100 bytes"},
			{map[string]any{"transactionId": "order-42", "partitionId": pid, "data": 1, "consumerGroup": 3},
				"consumerGroup must be a string"},
			{"[1]", "Request body must be a JSON object"},
			{"{", "Invalid JSON"},
		} {
			status, out := b.trace(t, c.body)
			require.Equal(t, http.StatusBadRequest, status, "%v", c.body)
			require.Contains(t, out["error"], c.want)
		}
		require.Equal(t, before, d.int(t, `SELECT count(*) FROM queen.traces`))
	})

	t.Run("unknown message", func(t *testing.T) {
		status, out := b.trace(t, map[string]any{"transactionId": "nope", "partitionId": pid, "data": 1})
		require.Equal(t, http.StatusOK, status, "a 2xx: a consumer's trace call never fails its handler")
		require.Equal(t, map[string]any{"success": false, "error": "Message not found"}, out)
	})

	t.Run("by message", func(t *testing.T) {
		var l traceList
		getJSON(t, b.URL+"/api/v1/traces/"+pid+"/order-42", &l)
		require.Len(t, l.Traces, 2)
		e := l.Traces[0]
		require.Equal(t, first, e.ID)
		require.Equal(t, "info", e.EventType)
		require.Equal(t, "__QUEUE_MODE__", e.ConsumerGroup)
		require.JSONEq(t, `{"text":"validated"}`, string(e.Data))
		require.Equal(t, []string{"7", "order-42", "tenant-acme"}, e.TraceNames, "sorted, duplicates collapsed")
		require.NotEmpty(t, e.WorkerID)
		_, err := time.Parse("2006-01-02T15:04:05.000Z", e.CreatedAt)
		require.NoError(t, err)
		require.Equal(t, second, l.Traces[1].ID)
		require.Equal(t, "step", l.Traces[1].EventType)
		require.Equal(t, "billing", l.Traces[1].ConsumerGroup)
		require.Equal(t, "null", string(l.Traces[1].Data))
		require.Equal(t, []string{"order-42"}, l.Traces[1].TraceNames)

		getJSON(t, b.URL+"/api/v1/traces/"+pid+"/unknown", &l)
		require.Equal(t, []traceEvent{}, l.Traces)
		status, _ := do(t, "GET", b.URL+"/api/v1/traces/not-a-uuid/order-42", nil)
		require.Equal(t, http.StatusBadRequest, status)
	})

	t.Run("by name", func(t *testing.T) {
		var l traceList
		getJSON(t, b.URL+"/api/v1/traces/by-name/tenant-acme", &l)
		require.Equal(t, int64(2), l.Total)
		require.Equal(t, 100, l.Pagination.Limit)
		require.Len(t, l.Traces, 2)
		e := l.Traces[0]
		require.Equal(t, first, e.ID)
		require.Equal(t, "order-42", e.TransactionID)
		require.Equal(t, pid, e.PartitionID)
		require.Equal(t, "orders", e.QueueName)
		require.Equal(t, "eu", e.PartitionName)
		require.NotNil(t, e.MessagePayload)
		require.JSONEq(t, `{"total":12}`, string(*e.MessagePayload))
		require.Equal(t, "order-43", l.Traces[1].TransactionID)
		require.JSONEq(t, `"second"`, string(*l.Traces[1].MessagePayload))

		// Real pagination, oldest first.
		getJSON(t, b.URL+"/api/v1/traces/by-name/tenant-acme?limit=1&offset=1", &l)
		require.Equal(t, int64(2), l.Total)
		require.Len(t, l.Traces, 1)
		require.Equal(t, "order-43", l.Traces[0].TransactionID)
		getJSON(t, b.URL+"/api/v1/traces/by-name/tenant-acme?offset=5", &l)
		require.Empty(t, l.Traces)
		require.Equal(t, int64(2), l.Total)

		// The literal route wins over :partitionId/:transactionId, and the
		// name is percent-decoded.
		b.trace(t, map[string]any{"transactionId": "order-43", "partitionId": pid, "data": 1, "traceNames": "a b/c"})
		getJSON(t, b.URL+"/api/v1/traces/by-name/"+url.PathEscape("a b/c"), &l)
		require.Equal(t, int64(1), l.Total)
		getJSON(t, b.URL+"/api/v1/traces/by-name/unknown", &l)
		require.Equal(t, int64(0), l.Total)
		require.Equal(t, []traceEvent{}, l.Traces)
	})

	t.Run("names", func(t *testing.T) {
		var l traceNameList
		getJSON(t, b.URL+"/api/v1/traces/names", &l)
		require.Equal(t, int64(4), l.Total) // 7, order-42, tenant-acme, "a b/c"
		require.Len(t, l.TraceNames, 4)
		require.Equal(t, "a b/c", l.TraceNames[0].TraceName, "most recently seen first")
		counts := map[string][2]int64{}
		for _, n := range l.TraceNames {
			counts[n.TraceName] = [2]int64{n.TraceCount, n.MessageCount}
		}
		require.Equal(t, [2]int64{2, 2}, counts["tenant-acme"])
		require.Equal(t, [2]int64{2, 1}, counts["order-42"])
		getJSON(t, b.URL+"/api/v1/traces/names?limit=1&offset=1", &l)
		require.Len(t, l.TraceNames, 1)
		require.Equal(t, int64(4), l.Total)
		getJSON(t, b.URL+"/api/v1/traces/names?offset=10", &l)
		require.Empty(t, l.TraceNames)
		require.Equal(t, int64(4), l.Total)
	})
}

// Trace events live as long as their message: retention removes them with
// it, a queue delete with its partitions.
func TestTracesFollowTheirMessage(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "short", map[string]any{"retentionEnabled": true, "retentionSeconds": 60})
	old := b.push(t, item{"queue": "short", "transactionId": "old"})
	young := b.push(t, item{"queue": "short", "transactionId": "young"})
	pid := *old[0].PartitionID
	for _, tx := range []string{"old", "young"} {
		status, _ := b.trace(t, map[string]any{"transactionId": tx, "partitionId": pid, "data": 1, "traceNames": "n"})
		require.Equal(t, http.StatusCreated, status)
	}
	d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '120 seconds'
		WHERE partition_id = $1 AND first_offset = 0`, pid)
	st := sqlstoretest.OpenSchema(t, b.Schema)
	stats, err := st.RetainOnce(context.Background(), 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats.Segments)
	require.Equal(t, int64(1), stats.Traces)
	var l traceList
	getJSON(t, b.URL+"/api/v1/traces/by-name/n", &l)
	require.Equal(t, int64(1), l.Total)
	require.Equal(t, "young", l.Traces[0].TransactionID)
	getJSON(t, b.URL+"/api/v1/traces/"+pid+"/old", &l)
	require.Empty(t, l.Traces)
	require.Equal(t, *young[0].PartitionID, pid)

	b.push(t, item{"queue": "other", "transactionId": "x"})
	status, _ := do(t, "DELETE", b.URL+"/api/v1/resources/queues/short", nil)
	require.Equal(t, http.StatusOK, status)
	require.Zero(t, d.int(t, `SELECT count(*) FROM queen.traces`))
}
