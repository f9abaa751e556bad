package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClassifyPush(t *testing.T) {
	t.Parallel()
	body := `[{"index":0,"message_id":"m","transaction_id":"a","queueName":"q","status":"queued","partition_id":"p","trace_id":null},
		{"index":1,"message_id":"m","transaction_id":"b","queueName":"q","status":"duplicate"},
		{"index":2,"transaction_id":"c","queueName":"q","status":"failed","error":"x","retryable":true}]`
	o := classifyPush(201, []byte(body), 3)
	require.True(t, o.OK())
	require.Equal(t, PushOutcome{Status: 201, Queued: 1, Duplicate: 1, Failed: 1}, o)

	o = classifyPush(201, []byte(`[{"status":"queued"}]`), 2)
	require.False(t, o.OK(), "wrong number of results")
	require.Equal(t, 1, o.Queued)

	o = classifyPush(503, []byte(`{"error":"overloaded"}`), 2)
	require.True(t, o.Retryable())
	require.EqualError(t, o.Err, "HTTP 503: overloaded")

	o = classifyPush(400, []byte(`not json`), 2)
	require.False(t, o.Retryable())
	require.EqualError(t, o.Err, "HTTP 400: not json")

	require.True(t, (&PushOutcome{}).Retryable(), "network error")
}

func TestNewClientURL(t *testing.T) {
	t.Parallel()
	c, err := NewClient("http://127.0.0.1", 0)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:80", c.hc.Addr)
	_, err = NewClient("ftp://x", 0)
	require.Error(t, err)
	_, err = NewClient("http://", 0)
	require.Error(t, err)
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, nil)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:6632", o.url)
	require.Equal(t, "loadtest", o.queue)
	require.Equal(t, 16, o.connections)
	require.Equal(t, 16, o.partitions)
	require.Equal(t, 10, o.items)
	require.Equal(t, 200, o.payload)
	require.Equal(t, -1, o.dedupWindow)
	require.Equal(t, "c16-p16-i10", o.label)

	o, err = parseFlags([]string{"-rate", "500", "-dup-ratio", "0.5"}, nil)
	require.NoError(t, err)
	require.Equal(t, "c16-p16-i10-r500-dup0.5", o.label)

	for _, bad := range [][]string{{"-dup-ratio", "1.5"}, {"-connections", "0"}, {"-duration", "0s"}, {"-dedup-window", "-2"}, {"extra"}} {
		_, err := parseFlags(bad, nil)
		require.Error(t, err, "%v", bad)
	}
}
