package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/partition"
)

type deleteAnswer struct {
	Success       bool   `json:"success"`
	PartitionID   string `json:"partitionId"`
	TransactionID string `json:"transactionId"`
	Message       string `json:"message"`
	Error         string `json:"error"`
}

// deleteMessage calls DELETE /api/v1/messages/:partitionId/:transactionId.
func (b *testBroker) deleteMessage(t *testing.T, pid, txID string) (int, deleteAnswer) {
	t.Helper()
	status, raw := do(t, "DELETE", b.URL+"/api/v1/messages/"+url.PathEscape(pid)+"/"+url.PathEscape(txID), nil)
	var a deleteAnswer
	require.NoError(t, json.Unmarshal(raw, &a), "%s", raw)
	return status, a
}

func txIDs(ms []popMessage) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.TransactionID)
	}
	return out
}

// A deleted message is never delivered or shown again, its payload leaves
// the database, its dead letters and trace events go with it, and its
// transaction id stays a duplicate inside the window.
func TestDeleteMessage(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	sent := b.push(t,
		item{"queue": "orders", "partition": "eu", "transactionId": "m-0", "payload": "secret-0"},
		item{"queue": "orders", "partition": "eu", "transactionId": "m-1", "payload": map[string]any{"card": "secret-1"},
			"traceId": "01990000-0000-7000-8000-000000000001"},
		item{"queue": "orders", "partition": "eu", "transactionId": "m-2", "payload": "secret-2"},
		item{"queue": "orders", "partition": "eu", "transactionId": "m-3", "payload": "secret-3"})
	pid := *sent[0].PartitionID
	status, tr := b.trace(t, map[string]any{"transactionId": "m-1", "partitionId": pid, "data": map[string]any{"text": "seen"}})
	require.Equal(t, http.StatusCreated, status, "%v", tr)

	// Bad input and unknown messages change nothing.
	status, raw := do(t, "DELETE", b.URL+"/api/v1/messages/not-a-uuid/m-1", nil)
	require.Equal(t, http.StatusBadRequest, status, "%s", raw)
	status, a := b.deleteMessage(t, pid, "never-pushed")
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, deleteAnswer{PartitionID: pid, TransactionID: "never-pushed", Message: "Message not found",
		Error: "Message not found"}, a)
	status, _ = b.deleteMessage(t, "01990000-0000-7000-8000-0000000000ff", "m-1")
	require.Equal(t, http.StatusNotFound, status)

	status, a = b.deleteMessage(t, pid, "m-1")
	require.Equal(t, http.StatusOK, status, "%+v", a)
	require.True(t, a.Success)
	require.Equal(t, pid, a.PartitionID)
	require.Equal(t, "m-1", a.TransactionID)
	require.NotEmpty(t, a.Message)
	// Once: a second delete finds nothing.
	status, a = b.deleteMessage(t, pid, "m-1")
	require.Equal(t, http.StatusNotFound, status)
	require.False(t, a.Success)

	// Gone from every read; the payload is no longer in PostgreSQL.
	status, raw = do(t, "GET", b.URL+"/api/v1/messages/"+pid+"/m-1", nil)
	require.Equal(t, http.StatusNotFound, status, "%s", raw)
	status, raw = do(t, "GET", b.URL+"/api/v1/traces/"+pid+"/m-1", nil)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"traces":[]}`, string(raw))
	require.Zero(t, d.int(t, `SELECT count(*) FROM queen.traces`))
	_, tr = b.trace(t, map[string]any{"transactionId": "m-1", "partitionId": pid, "data": 1})
	require.Equal(t, false, tr["success"], "no trace on a deleted message: %v", tr)
	require.Zero(t, d.int(t, `SELECT count(*) FROM queen.segments WHERE position('secret-1'::bytea IN frames) > 0`))
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.segments WHERE position('secret-2'::bytea IN frames) > 0`))
	status, raw = do(t, "GET", b.URL+"/api/v1/messages?queue=orders", nil)
	require.Equal(t, http.StatusOK, status)
	var list struct {
		Messages []popMessage `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Equal(t, []string{"m-3", "m-2", "m-0"}, txIDs(list.Messages))

	// Never delivered: not to queue mode, not to a named group.
	got := b.pop(t, "orders", "eu", url.Values{"batch": {"10"}})
	require.Equal(t, []string{"m-0", "m-2", "m-3"}, txIDs(got.Messages))
	for _, m := range got.Messages {
		require.True(t, b.ack(t, m, "completed", "").Success)
	}
	got = b.pop(t, "orders", "eu", url.Values{"batch": {"10"}, "consumerGroup": {"audit"}, "autoAck": {"true"}})
	require.Equal(t, []string{"m-0", "m-2", "m-3"}, txIDs(got.Messages))

	// Its transaction id stays in the window: a producer's retry is a
	// duplicate with the zero UUID (the original is gone), nothing written.
	_, frames, _, _, next := d.partitionStats(t, "orders", "eu")
	retry := b.push(t, item{"queue": "orders", "partition": "eu", "transactionId": "m-1", "payload": "again"})
	require.Equal(t, "duplicate", retry[0].Status)
	require.Equal(t, partition.ZeroUUID.String(), retry[0].MessageID)
	_, frames2, _, _, next2 := d.partitionStats(t, "orders", "eu")
	require.Equal(t, frames, frames2)
	require.Equal(t, next, next2)
	ex := b.explain(t, "orders", "eu", "m-1")
	require.Equal(t, "duplicate", ex.Verdict)
	require.True(t, ex.OriginalUnknown)
	require.Contains(t, *ex.OriginalUnknownReason, "deleted")
}

// A message deleted while leased is not redelivered; acking the batch
// (the deleted one included) completes it. Its dead letters go with it.
// Deleted messages ahead of the cursor do not hide the ones after them.
func TestDeleteMessageLeasedDeadLetteredAndRuns(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	sent := b.push(t, item{"queue": "jobs", "partition": "p", "transactionId": "n-0"},
		item{"queue": "jobs", "partition": "p", "transactionId": "n-1"},
		item{"queue": "jobs", "partition": "p", "transactionId": "n-2"})
	pid := *sent[0].PartitionID
	leased := b.pop(t, "jobs", "p", url.Values{"batch": {"3"}})
	require.Len(t, leased.Messages, 3)
	status, _ := b.deleteMessage(t, pid, "n-1")
	require.Equal(t, http.StatusOK, status)
	acks := b.ackBatch(t, leased.Messages, "completed", "")
	for _, r := range acks {
		require.True(t, r.Success, "%+v", r)
	}
	status, _ = do(t, "GET", b.URL+"/api/v1/pop/queue/jobs/partition/p", nil)
	require.Equal(t, http.StatusNoContent, status, "nothing left, n-1 is not redelivered")

	// A dead letter is deleted with its message.
	b.push(t, item{"queue": "jobs", "partition": "p", "transactionId": "x-0", "payload": "poison"})
	m := b.pop(t, "jobs", "p", nil).Messages[0]
	require.True(t, b.ack(t, m, "dlq", "").DLQ)
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.dlq`))
	status, _ = b.deleteMessage(t, pid, "x-0")
	require.Equal(t, http.StatusOK, status)
	require.Zero(t, d.int(t, `SELECT count(*) FROM queen.dlq`))
	_, raw := do(t, "GET", b.URL+"/api/v1/dlq?queue=jobs", nil)
	var dlq struct {
		Total int `json:"total"`
	}
	require.NoError(t, json.Unmarshal(raw, &dlq))
	require.Zero(t, dlq.Total)

	// One push per message: one segment each. Deleting a run of them at
	// the cursor leaves a pop of one message to read past the run.
	for _, tx := range []string{"y-0", "y-1", "y-2", "y-3"} {
		b.push(t, item{"queue": "jobs", "partition": "p", "transactionId": tx})
	}
	for _, tx := range []string{"y-0", "y-1", "y-2"} {
		status, _ = b.deleteMessage(t, pid, tx)
		require.Equal(t, http.StatusOK, status, tx)
	}
	got := b.pop(t, "jobs", "p", url.Values{"batch": {"1"}})
	require.Equal(t, []string{"y-3"}, txIDs(got.Messages))
	require.True(t, b.ack(t, got.Messages[0], "completed", "").Success)
	status, _ = do(t, "GET", b.URL+"/api/v1/pop/queue/jobs/partition/p", nil)
	require.Equal(t, http.StatusNoContent, status)
}
