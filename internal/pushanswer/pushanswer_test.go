package pushanswer

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadReginaAnswer(t *testing.T) {
	t.Parallel()
	body := `[{"index":0,"message_id":"m","transaction_id":"a","queueName":"q","status":"queued","partition_id":"p","trace_id":null},
		{"index":1,"message_id":"m","transaction_id":"b","queueName":"q","status":"duplicate"},
		{"index":2,"transaction_id":"c","queueName":"q","status":"failed","error":"x","retryable":true}]`
	a := Read(201, []byte(body), 3)
	require.Equal(t, Answer{Status: 201, Kind: OK, Queued: 1, Duplicate: 1, Failed: 1}, a)
	require.Equal(t, 2, a.Acked())
	require.False(t, a.Retryable())
}

// Upstream Queen answers a push with 200, and its stored procedures render
// JSON with spaces after the colons.
func TestReadQueenAnswer(t *testing.T) {
	t.Parallel()
	body := `[{"index": 7, "status": "queued", "queueName": "q", "message_id": "0199", "partition_id": "u", "trace_id": null, "transaction_id": "a"},
		{"index": 8, "status": "duplicate", "queueName": "q", "message_id": "0198", "transaction_id": "b"}]`
	a := Read(200, []byte(body), 2)
	require.Equal(t, Answer{Status: 200, Kind: OK, Queued: 1, Duplicate: 1}, a)

	// Failover or maintenance: items written to Queen's file buffer.
	a = Read(200, []byte(`[{"status":"buffered","queue":"q","partition":"p","transactionId":"a"},{"status":"buffered","queue":"q","partition":"p"}]`), 2)
	require.Equal(t, Answer{Status: 200, Kind: OK, Buffered: 2}, a)
	require.Zero(t, a.Acked())
}

func TestReadErrors(t *testing.T) {
	t.Parallel()
	// Queen's database error goes out as 200 with an error object: a
	// retryable failure, not a success.
	a := Read(200, []byte(`{"error": "connection to server lost"}`), 2)
	require.Equal(t, ErrorBody, a.Kind)
	require.True(t, a.Retryable())
	require.EqualError(t, a.Err, "HTTP 200 with an error body: connection to server lost")
	a = Read(200, []byte(`{"status":"failed","error":"File buffer write failed"}`), 2)
	require.Equal(t, ErrorBody, a.Kind)

	a = Read(503, []byte(`{"error":"Partition mailbox is full; retry with backoff"}`), 2)
	require.Equal(t, HTTPError, a.Kind)
	require.True(t, a.Retryable())
	require.EqualError(t, a.Err, "HTTP 503: Partition mailbox is full; retry with backoff")

	a = Read(400, []byte("not json"), 2)
	require.Equal(t, HTTPError, a.Kind)
	require.False(t, a.Retryable())
	require.EqualError(t, a.Err, "HTTP 400: not json")

	a = Read(201, []byte(`[{"status":"queued"}]`), 2)
	require.Equal(t, Malformed, a.Kind)
	require.Equal(t, 1, a.Queued, "verdicts that could be read are kept")
	require.False(t, a.Retryable())

	for _, body := range []string{"", "null x", `{"items":[]}`, "[1,2]"} {
		a = Read(200, []byte(body), 2)
		require.Equal(t, Malformed, a.Kind, "%q", body)
		require.Zero(t, a.Acked(), "%q", body)
	}

	a = Failure(errors.New("dial tcp: connection refused"))
	require.Equal(t, NoAnswer, a.Kind)
	require.Zero(t, a.Status)
	require.True(t, a.Retryable())
}

func TestErrorInBody(t *testing.T) {
	t.Parallel()
	require.Equal(t, "boom", ErrorInBody([]byte(` {"error":"boom"}`)))
	require.Empty(t, ErrorInBody([]byte(`{"configured":true}`)))
	require.Empty(t, ErrorInBody([]byte(`[]`)))
	require.Empty(t, ErrorInBody(nil))
}
