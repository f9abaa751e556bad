package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryQueenRouteIsServed calls every route a Queen client (Go, JS,
// Python, the CLI) or Queen's web dashboard calls, as listed by
// queen-wire-api.md (sections 4 and 9) and queen-parity.md (section 10),
// against a broker holding a queue, a message, a consumer group and a
// trace: none may answer 405 or the router's 404 (a route Regina does not
// implement answers 501 with the reason).
func TestEveryQueenRouteIsServed(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	sent := b.push(t, item{"queue": "rq", "partition": "p1", "transactionId": "t-1", "payload": map[string]any{"n": 1}},
		item{"queue": "rq", "partition": "p1", "transactionId": "t-2", "payload": map[string]any{"n": 2}})
	pid := *sent[0].PartitionID
	status, body := do(t, "GET", b.URL+"/api/v1/pop/queue/rq?batch=1&consumerGroup=g1&autoAck=true", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	st, _ := b.trace(t, map[string]any{"transactionId": "t-1", "partitionId": pid, "data": map[string]any{"text": "x"},
		"traceNames": []string{"n1"}})
	require.Equal(t, http.StatusCreated, st)
	status, body = do(t, "GET", b.URL+"/api/v1/pop/queue/rq?batch=1", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var pop popResponse
	require.NoError(t, json.Unmarshal(body, &pop))
	lease := pop.LeaseID

	ackBody := map[string]any{"transactionId": "t-1", "partitionId": pid, "leaseId": lease, "status": "completed"}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		// Clients (wire-api §4).
		{"GET", "/health", nil},
		{"GET", "/metrics", nil},
		{"GET", "/metrics/prometheus", nil},
		{"POST", "/api/v1/push", map[string]any{"items": []any{map[string]any{"queue": "rq", "payload": 1}}}},
		{"GET", "/api/v1/pop/queue/rq?wait=false", nil},
		{"GET", "/api/v1/pop/queue/rq/partition/p1?wait=false", nil},
		{"POST", "/api/v1/lease/" + lease + "/extend", map[string]any{"seconds": 30}},
		{"POST", "/api/v1/ack", ackBody},
		{"POST", "/api/v1/ack/batch", map[string]any{"acknowledgments": []any{ackBody}}},
		{"POST", "/api/v1/transaction", map[string]any{"operations": []any{map[string]any{"type": "push",
			"items": []any{map[string]any{"queue": "rq", "payload": 2}}}}}},
		{"POST", "/api/v1/configure", map[string]any{"queue": "rq2", "options": map[string]any{}}},
		{"GET", "/api/v1/dlq?queue=rq", nil},
		{"POST", "/api/v1/traces", map[string]any{"transactionId": "t-2", "partitionId": pid, "data": 1}},
		// Secondary routes (wire-api §9) and the dashboard (parity §10).
		{"GET", "/api/v1/resources/overview", nil},
		{"GET", "/api/v1/resources/queues?namespace=&task=&limit=10&offset=0", nil},
		{"GET", "/api/v1/resources/queues/rq", nil},
		{"GET", "/api/v1/resources/namespaces", nil},
		{"GET", "/api/v1/resources/tasks", nil},
		{"GET", "/api/v1/messages?queue=rq&limit=10", nil},
		{"GET", "/api/v1/messages/" + pid + "/t-2", nil},
		{"POST", "/api/v1/messages/" + pid + "/t-2/dlq", nil},
		{"GET", "/api/v1/status", nil},
		{"GET", "/api/v1/status/queues", nil},
		{"GET", "/api/v1/status/queues/rq", nil},
		{"GET", "/api/v1/status/queues/rq/messages", nil},
		{"GET", "/api/v1/status/analytics?interval=hour", nil},
		{"GET", "/api/v1/status/buffers", nil},
		{"GET", "/api/v1/analytics/system-metrics", nil},
		{"GET", "/api/v1/analytics/worker-metrics", nil},
		{"GET", "/api/v1/analytics/queue-lag", nil},
		{"GET", "/api/v1/analytics/queue-ops", nil},
		{"GET", "/api/v1/analytics/queue-parked-replicas", nil},
		{"GET", "/api/v1/analytics/retention", nil},
		{"GET", "/api/v1/analytics/postgres-stats", nil},
		{"GET", "/api/v1/consumer-groups", nil},
		{"GET", "/api/v1/consumer-groups/lagging?minLagSeconds=60", nil},
		{"GET", "/api/v1/consumer-groups/g1", nil},
		{"POST", "/api/v1/consumer-groups/g1/queues/rq/seek", map[string]any{"toEnd": true}},
		{"POST", "/api/v1/consumer-groups/g1/queues/rq/partitions/p1/seek", map[string]any{}},
		{"POST", "/api/v1/consumer-groups/g1/subscription", map[string]any{"subscriptionTimestamp": "2026-01-01T00:00:00Z"}},
		{"POST", "/api/v1/stats/refresh", nil},
		{"GET", "/api/v1/traces/" + pid + "/t-1", nil},
		{"GET", "/api/v1/traces/by-name/n1", nil},
		{"GET", "/api/v1/traces/names", nil},
		{"GET", "/api/v1/migration/status", nil},
		{"POST", "/api/v1/migration/test-connection", map[string]any{}},
		{"POST", "/api/v1/migration/start", map[string]any{}},
		{"POST", "/api/v1/migration/validate", map[string]any{}},
		{"POST", "/api/v1/migration/reset", map[string]any{}},
		{"POST", "/api/v1/messages/" + pid + "/t-2/retry", nil},
		// Called by clients although Queen's server does not serve them
		// (wire-api §9, last paragraph).
		{"GET", "/api/v1/resources/partitions?queue=rq", nil},
		{"GET", "/api/v1/pop?namespace=rq&task=&wait=false", nil},
		{"DELETE", "/api/v1/queues/rq/clear", nil},
		{"POST", "/api/v1/stream/define", map[string]any{}},
		{"POST", "/api/v1/stream/poll", map[string]any{}},
		{"POST", "/api/v1/stream/ack", map[string]any{}},
		{"POST", "/api/v1/stream/renew-lease", map[string]any{}},
		{"POST", "/api/v1/stream/seek", map[string]any{}},
		// Regina's streams (Queen's streaming SDKs).
		{"POST", "/streams/v1/queries", map[string]any{}},
		{"POST", "/streams/v1/state/get", map[string]any{}},
		{"POST", "/streams/v1/cycle", map[string]any{}},
		// Maintenance mode (parity §4), switched off again at once.
		{"GET", "/api/v1/system/maintenance", nil},
		{"POST", "/api/v1/system/maintenance", map[string]any{"enabled": false}},
		{"GET", "/api/v1/system/maintenance/pop", nil},
		{"POST", "/api/v1/system/maintenance/pop", map[string]any{"enabled": false}},
		// Deletes last: they remove what the routes above read (the message
		// delete names a message that does not exist: the handler's 404).
		{"DELETE", "/api/v1/messages/" + pid + "/t-none", nil},
		{"DELETE", "/api/v1/consumer-groups/g1/queues/rq?deleteMetadata=true", nil},
		{"DELETE", "/api/v1/consumer-groups/g1?deleteMetadata=false", nil},
		{"DELETE", "/api/v1/resources/queues/rq2", nil},
	} {
		status, body := do(t, c.method, b.URL+c.path, c.body)
		what := c.method + " " + c.path
		require.NotEqual(t, http.StatusMethodNotAllowed, status, "%s: %s", what, body)
		// A handler may answer 404 about what it looked for (a retry of
		// a message that is not a dead letter); the router's 404 says only
		// "Not Found".
		if status == http.StatusNotFound {
			require.NotEqual(t, `{"error":"Not Found"}`, string(body), "%s: no such route", what)
		}
		if status == http.StatusNotImplemented {
			require.True(t, strings.HasPrefix(string(body), `{"error":`), "%s: %s", what, body)
		}
	}

	var parts struct {
		Partitions []struct {
			ID, Name, Queue string
			Messages        struct{ Total, Pending, Processing int64 }
		} `json:"partitions"`
	}
	getJSON(t, b.URL+"/api/v1/resources/partitions?queue=rq", &parts)
	require.Len(t, parts.Partitions, 2, "p1 and Default (the push without a partition)")
	byName := map[string]int64{}
	for _, p := range parts.Partitions {
		require.Equal(t, "rq", p.Queue)
		byName[p.Name] = p.Messages.Total
	}
	require.EqualValues(t, 2, byName["p1"])
}
