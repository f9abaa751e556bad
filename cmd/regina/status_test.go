package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// jsonMetrics is the part of GET /metrics the tests read.
type jsonMetrics struct {
	Uptime   int64 `json:"uptime"`
	Requests struct {
		Total uint64  `json:"total"`
		Rate  float64 `json:"rate"`
	} `json:"requests"`
	Messages struct {
		Total uint64  `json:"total"`
		Rate  float64 `json:"rate"`
	} `json:"messages"`
	Database struct {
		PoolSize        *int32 `json:"poolSize"`
		IdleConnections *int32 `json:"idleConnections"`
	} `json:"database"`
	Memory struct {
		RSS      *int64 `json:"rss"`
		HeapUsed *int64 `json:"heapUsed"`
	} `json:"memory"`
	CPU struct {
		User   *float64 `json:"user"`
		System *float64 `json:"system"`
	} `json:"cpu"`
}

func getMetrics(t *testing.T, b *testBroker) jsonMetrics {
	t.Helper()
	status, body := do(t, "GET", b.URL+"/metrics", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var m jsonMetrics
	require.NoError(t, json.Unmarshal(body, &m), "%s", body)
	return m
}

// TestMetricsJSONCountsRequestsAndMessages: GET /metrics reports the
// requests this broker served and the messages it queued (duplicates and
// refused requests count as requests, not messages), not Queen's zeros.
func TestMetricsJSONCountsRequestsAndMessages(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	before := getMetrics(t, b)
	require.Equal(t, uint64(1), before.Requests.Total, "the scrape itself is the first request")
	require.Zero(t, before.Messages.Total)

	b.push(t, item{"queue": "m", "transactionId": "a"}, item{"queue": "m", "transactionId": "b"},
		item{"queue": "m2", "transactionId": "c"})
	b.push(t, item{"queue": "m", "transactionId": "a"}) // duplicate
	status, _ := b.pushRaw(t, "not json")
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = do(t, "GET", b.URL+"/no/such/route", nil)
	require.Equal(t, http.StatusNotFound, status)

	m := getMetrics(t, b)
	// 1 scrape + 2 pushes + 1 refused push + 1 unknown route + this scrape.
	require.Equal(t, uint64(6), m.Requests.Total)
	require.Equal(t, uint64(3), m.Messages.Total, "queued items only")
	require.NotNil(t, m.Database.PoolSize)
	require.Positive(t, *m.Database.PoolSize)
	require.NotNil(t, m.Memory.HeapUsed)
	require.Positive(t, *m.Memory.HeapUsed)
	require.NotNil(t, m.Memory.RSS, "Linux: /proc/self/statm")
	require.Positive(t, *m.Memory.RSS)
	require.NotNil(t, m.CPU.User)
	require.GreaterOrEqual(t, m.Uptime, int64(0))
}
