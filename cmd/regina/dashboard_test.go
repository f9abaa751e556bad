package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Field kinds checkFields knows: a JSON type, or several separated by "|"
// ("number|null": a number or null; "any": present, whatever it holds).
const (
	kNum     = "number"
	kStr     = "string"
	kBool    = "bool"
	kArr     = "array"
	kObj     = "object"
	kNumNull = "number|null"
	kStrNull = "string|null"
	kAny     = "any"
)

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case float64:
		return kNum
	case string:
		return kStr
	case bool:
		return kBool
	case []any:
		return kArr
	case map[string]any:
		return kObj
	}
	return fmt.Sprintf("%T", v)
}

// lookup walks path ("a.b", "a[].b": every element of a, "[]": the root
// array's elements) from v and returns every value it reaches; an array on
// the way must not be empty, and every key must be present.
func lookup(t *testing.T, what string, v any, path string) []any {
	t.Helper()
	cur := []any{v}
	for seg := range strings.SplitSeq(path, ".") {
		each := strings.HasSuffix(seg, "[]")
		key := strings.TrimSuffix(seg, "[]")
		var next []any
		for _, c := range cur {
			x := c
			if key != "" {
				obj, ok := c.(map[string]any)
				require.True(t, ok, "%s: %s: %q is not inside an object (%s)", what, path, key, jsonKind(c))
				x, ok = obj[key]
				require.True(t, ok, "%s: %s: key %q missing", what, path, key)
			}
			if each {
				arr, ok := x.([]any)
				require.True(t, ok, "%s: %s: %q is %s, not an array", what, path, key, jsonKind(x))
				require.NotEmpty(t, arr, "%s: %s: %q is empty", what, path, key)
				next = append(next, arr...)
			} else {
				next = append(next, x)
			}
		}
		cur = next
	}
	return cur
}

// checkFields requires every path of fields to be present with its kind.
func checkFields(t *testing.T, what string, body []byte, fields map[string]string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(body, &v), "%s: %s", what, body)
	for path, kind := range fields {
		for _, x := range lookup(t, what, v, path) {
			if kind == kAny {
				continue
			}
			require.Contains(t, strings.Split(kind, "|"), jsonKind(x), "%s: %s is %s (%v), want %s",
				what, path, jsonKind(x), x, kind)
		}
	}
	return v
}

// at returns the single value at path.
func at(t *testing.T, v any, path string) any {
	t.Helper()
	xs := lookup(t, path, v, path)
	require.Len(t, xs, 1, path)
	return xs[0]
}

// TestDashboardEndpoints walks every endpoint Queen's web dashboard calls
// (queen-parity.md §10) against a broker holding a pushed, a popped, an
// acknowledged and a dead-lettered message, a named consumer group and a
// trace, and checks that each field the dashboard reads is there with the
// type it expects, and that the figures add up.
func TestDashboardEndpoints(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.statsFlush = 100 * time.Millisecond })
	const q = "shop.orders"
	status, body := do(t, "POST", b.URL+"/api/v1/configure", map[string]any{"queue": q, "namespace": "shop",
		"task": "orders", "options": map[string]any{"leaseTime": 120, "retryLimit": 2}})
	require.Equal(t, http.StatusOK, status, "%s", body)
	sent := b.push(t, item{"queue": q, "partition": "eu", "transactionId": "o-1", "payload": map[string]any{"n": 1}},
		item{"queue": q, "partition": "eu", "transactionId": "o-2", "payload": map[string]any{"n": 2}},
		item{"queue": q, "partition": "eu", "transactionId": "o-3", "payload": map[string]any{"n": 3}})
	pid := *sent[0].PartitionID

	// Queue mode: pop two, ack one, dead-letter the other; o-3 stays pending.
	status, body = do(t, "GET", b.URL+"/api/v1/pop/queue/"+q+"?batch=2", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var pop popResponse
	require.NoError(t, json.Unmarshal(body, &pop))
	require.Len(t, pop.Messages, 2)
	status, body = do(t, "POST", b.URL+"/api/v1/ack/batch", map[string]any{"acknowledgments": []any{
		map[string]any{"transactionId": "o-1", "partitionId": pid, "leaseId": pop.LeaseID, "status": "completed"},
		map[string]any{"transactionId": "o-2", "partitionId": pid, "leaseId": pop.LeaseID, "status": "dlq",
			"error": "payment declined"}}})
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.NotContains(t, string(body), `"success":false`)
	// A named group reads everything with auto-ack.
	status, body = do(t, "GET", b.URL+"/api/v1/pop/queue/"+q+"?batch=10&consumerGroup=audit&autoAck=true", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	// A trace on o-3.
	st, tr := b.trace(t, map[string]any{"transactionId": "o-3", "partitionId": pid, "consumerGroup": "audit",
		"eventType": "step", "data": map[string]any{"text": "checked"}, "traceNames": []string{"order-3"}})
	require.Equal(t, http.StatusCreated, st)
	require.Equal(t, true, tr["success"], "%v", tr)

	// The counters reach the tables within a few flushes.
	require.Eventually(t, func() bool {
		_, body := do(t, "GET", b.URL+"/api/v1/analytics/queue-ops", nil)
		var v struct {
			Series []struct {
				PushMessages, PopMessages, AckSuccess int64
			} `json:"series"`
		}
		if json.Unmarshal(body, &v) != nil {
			return false
		}
		var push, pop, ack int64
		for _, s := range v.Series {
			push += s.PushMessages
			pop += s.PopMessages
			ack += s.AckSuccess
		}
		return push == 3 && pop == 5 && ack == 2
	}, 30*time.Second, 50*time.Millisecond, "queue-ops never showed 3 pushed, 5 delivered, 2 acked")
	require.Eventually(t, func() bool {
		_, body := do(t, "GET", b.URL+"/api/v1/analytics/system-metrics", nil)
		var v struct {
			Replicas []struct {
				TimeSeries []struct {
					Metrics struct {
						CPU struct {
							UserUs struct {
								Avg *float64 `json:"avg"`
							} `json:"user_us"`
						} `json:"cpu"`
					} `json:"metrics"`
				} `json:"timeSeries"`
			} `json:"replicas"`
		}
		if json.Unmarshal(body, &v) != nil || len(v.Replicas) != 1 {
			return false
		}
		// A CPU figure needs two samples, so the minute the broker started
		// in may have none (a test that starts near the end of a minute):
		// any minute of the series may carry it.
		for _, m := range v.Replicas[0].TimeSeries {
			if m.Metrics.CPU.UserUs.Avg != nil {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "system-metrics never showed a CPU sample")

	now := time.Now().UTC()
	rng := "from=" + url.QueryEscape(now.Add(-50*time.Minute).Format(time.RFC3339)) + "&to=" +
		url.QueryEscape(now.Add(time.Minute).Format(time.RFC3339))
	get := func(path string, fields map[string]string) any {
		t.Helper()
		status, body := do(t, "GET", b.URL+path, nil)
		require.Equal(t, http.StatusOK, status, "GET %s: %s", path, body)
		return checkFields(t, "GET "+path, body, fields)
	}

	// §10.1 shell.
	v := get("/health", map[string]string{"status": kStr})
	require.Equal(t, "healthy", at(t, v, "status"))
	for _, p := range []string{"/api/me"} {
		status, _ := do(t, "GET", b.URL+p, nil)
		require.GreaterOrEqual(t, status, 300, "%s must not answer 2xx (it turns on the dashboard's proxy mode)", p)
	}
	status, _ = do(t, "POST", b.URL+"/api/logout", nil)
	require.GreaterOrEqual(t, status, 300)

	// §10.2 dashboard.
	v = get("/api/v1/resources/overview", map[string]string{"queues": kNum, "messages.total": kNum,
		"messages.pending": kNum, "messages.completed": kNum, "throughput.ingestedPerSecond": kNum,
		"throughput.processedPerSecond": kNum, "lag.time.avg": kNumNull, "lag.time.max": kNumNull})
	require.EqualValues(t, 1, at(t, v, "queues"))
	require.EqualValues(t, 3, at(t, v, "messages.total"))
	require.EqualValues(t, 1, at(t, v, "messages.pending"), "o-3 (queue mode)")
	require.EqualValues(t, 2, at(t, v, "messages.completed"))
	v = get("/api/v1/resources/queues", map[string]string{"queues[].name": kStr, "queues[].namespace": kStr,
		"queues[].task": kStr, "queues[].partitions": kNum, "queues[].messages.total": kNum,
		"queues[].messages.pending": kNum, "queues[].messages.processing": kNum})
	require.EqualValues(t, 1, at(t, v, "queues[].messages.pending"))
	v = get("/api/v1/consumer-groups", map[string]string{"[].name": kStr, "[].queueName": kStr, "[].members": kNum,
		"[].maxTimeLag": kNum, "[].partitionsWithLag": kNum, "[].topics": kArr, "[].state": kStr})
	require.Len(t, v, 2, "queue mode and audit")
	v = get("/api/v1/status?"+rng, map[string]string{"throughput[].timestamp": kStr,
		"throughput[].ingestedPerSecond": kNum, "throughput[].popPerSecond": kNum,
		"throughput[].processedPerSecond": kNum, "throughput[].ingested": kNum, "throughput[].processed": kNum,
		"throughput[].avgLagMs": kNumNull, "throughput[].maxLagMs": kNumNull,
		"throughput[].avgEventLoopLagMs": kNumNull, "throughput[].maxEventLoopLagMs": kNumNull,
		"throughput[].dbErrors": kNum, "throughput[].ackFailed": kNum, "throughput[].dlqCount": kNum,
		"throughput[].queenCpuUserPct": kNumNull, "throughput[].queenCpuSysPct": kNumNull,
		"throughput[].dbPoolActive": kNumNull, "throughput[].dbPoolIdle": kNumNull,
		"throughput[].dbPoolSize": kNumNull, "bucketMinutes": kNum,
		"workers[].avgEventLoopLagMs": kNumNull, "workers[].maxEventLoopLagMs": kNumNull,
		"workers[].freeSlots": kNum, "workers[].dbConnections": kNum, "workers[].jobQueueSize": kNum,
		"messages.batchEfficiency.push": kNumNull, "messages.batchEfficiency.pop": kNumNull,
		"messages.batchEfficiency.ack": kNumNull,
		// §10.8 analytics and §10.9 dead letter read these too.
		"messages.total": kNum, "messages.pending": kNum, "messages.processing": kNum, "messages.completed": kNum,
		"messages.failed": kNum, "messages.deadLetter": kNum, "leases.active": kNum,
		"leases.partitionsWithLeases": kNum, "leases.totalBatchSize": kNum, "leases.totalAcked": kNum,
		"deadLetterQueue.totalMessages": kNum, "deadLetterQueue.affectedPartitions": kNum,
		"deadLetterQueue.topErrors[].error": kStr, "deadLetterQueue.topErrors[].count": kNum})
	require.EqualValues(t, 1, at(t, v, "bucketMinutes"))
	require.EqualValues(t, 1, at(t, v, "deadLetterQueue.totalMessages"))
	require.EqualValues(t, 1, at(t, v, "deadLetterQueue.affectedPartitions"))
	require.Equal(t, "payment declined", at(t, v, "deadLetterQueue.topErrors[].error"))
	var ingested, processed float64
	for _, x := range lookup(t, "status", v, "throughput[]") {
		ingested += x.(map[string]any)["ingested"].(float64)
		processed += x.(map[string]any)["processed"].(float64)
	}
	require.EqualValues(t, 3, ingested)
	require.EqualValues(t, 2, processed, "two acks (the auto-acked pop is not an ack request)")
	get("/api/v1/status", map[string]string{"deadLetterQueue.totalMessages": kNum}) // default window
	v = get("/api/v1/analytics/retention?"+rng, map[string]string{"series": kArr, "bucketMinutes": kNum,
		"totals.retentionMsgs": kNum, "totals.completedRetentionMsgs": kNum, "totals.evictionMsgs": kNum,
		"totals.eventCount": kNum})
	require.EqualValues(t, 0, at(t, v, "totals.eventCount"), "nothing was deleted")
	queueOps := map[string]string{"series[].bucket": kStr, "series[].queueName": kStr,
		"series[].partitionsCreated": kNum, "series[].partitionsDeleted": kNumNull, "series[].parkedCount": kNum,
		"series[].popMessages": kNum, "series[].popEmpty": kNum, "series[].pushMessages": kNum,
		"series[].maxLagMs": kNumNull, "series[].avgLagMs": kNumNull, "series[].pushPerSecond": kNum,
		"series[].popPerSecond": kNum, "series[].ackPerSecond": kNum, "series[].ackFailed": kNum,
		"series[].emptyPerSecond": kNum, "series[].transactions": kNum, "series[].partitionCount": kNumNull,
		"queues": kArr, "bucketMinutes": kNum}
	v = get("/api/v1/analytics/queue-ops?"+rng, queueOps)
	var created float64
	for _, x := range lookup(t, "queue-ops", v, "series[].partitionsCreated") {
		created += x.(float64)
	}
	require.EqualValues(t, 2, created, "Default (configure) and eu")
	get("/api/v1/analytics/queue-ops?"+rng+"&queue="+q, queueOps)
	v = get("/api/v1/analytics/system-metrics?"+rng, map[string]string{"replicaCount": kNum, "pointCount": kNum,
		"bucketMinutes": kNum, "replicas[].hostname": kStr, "replicas[].port": kNum,
		"replicas[].timeSeries[].timestamp":                                kStr,
		"replicas[].timeSeries[].metrics.cpu.user_us.avg":                  kNum,
		"replicas[].timeSeries[].metrics.cpu.system_us.avg":                kNum,
		"replicas[].timeSeries[].metrics.cpu.user_us.max":                  kNum,
		"replicas[].timeSeries[].metrics.memory.rss_bytes.last":            kNum,
		"replicas[].timeSeries[].metrics.database.pool_active.avg":         kNum,
		"replicas[].timeSeries[].metrics.database.pool_idle.avg":           kNum,
		"replicas[].timeSeries[].metrics.database.pool_size.avg":           kNum,
		"replicas[].timeSeries[].metrics.threadpool.db.queue_size.avg":     kNum,
		"replicas[].timeSeries[].metrics.threadpool.system.queue_size.avg": kNumNull})
	require.EqualValues(t, 1, at(t, v, "replicaCount"))

	// §10.4 queue detail.
	get("/api/v1/resources/queues/"+q, map[string]string{"name": kStr, "namespace": kStr, "task": kStr,
		"createdAt": kStr, "partitions[].stats.total": kNum})
	v = get("/api/v1/status/queues/"+q, map[string]string{"queue.name": kStr, "queue.namespace": kStr,
		"queue.task": kStr, "queue.priority": kNum, "queue.createdAt": kStr, "queue.config.leaseTime": kNum,
		"queue.config.ttl": kNum, "queue.config.maxQueueSize": kNum, "queue.config.retryLimit": kNum,
		"queue.config.retryDelay": kNum, "queue.config.deadLetterQueue": kBool,
		"partitions[].messages.total": kNum, "partitions[].messages.pending": kNum,
		"partitions[].cursor.totalConsumed": kNum, "totals.messages.total": kNum, "totals.messages.pending": kNum,
		"totals.messages.processing": kNum, "totals.messages.completed": kNum, "totals.messages.failed": kNum,
		"totals.messages.deadLetter": kNum})
	require.EqualValues(t, 120, at(t, v, "queue.config.leaseTime"))
	require.EqualValues(t, 3, at(t, v, "totals.messages.total"))

	// §10.5 messages.
	v = get("/api/v1/messages?limit=100&queue="+q, map[string]string{"messages[].id": kStr,
		"messages[].transactionId": kStr, "messages[].partitionId": kStr, "messages[].queue": kStr,
		"messages[].partition": kStr, "messages[].status": kStr, "messages[].createdAt": kStr,
		"messages[].busStatus.consumedBy": kNum, "messages[].busStatus.totalGroups": kNum,
		"messages[].mode.type": kStr, "messages[].mode.busGroupsCount": kNum})
	require.Equal(t, "hybrid", at(t, lookup(t, "messages", v, "messages[]")[0], "mode.type"))
	v = get("/api/v1/messages/"+pid+"/o-2", map[string]string{"transactionId": kStr, "partitionId": kStr,
		"queue": kStr, "partition": kStr, "status": kStr, "createdAt": kStr, "traceId": kStrNull, "payload": kObj,
		"errorMessage": kStrNull, "retryCount": kNumNull, "queueConfig.leaseTime": kNum,
		"queueConfig.retryLimit": kNum, "queueConfig.retryDelay": kNum, "queueConfig.ttl": kNum,
		"consumerGroups[].name": kStr, "consumerGroups[].consumed": kBool})
	require.Equal(t, "dead_letter", at(t, v, "status"))
	require.Equal(t, "payment declined", at(t, v, "errorMessage"))
	v = get("/api/v1/messages/"+pid+"/o-3", map[string]string{"status": kStr, "errorMessage": kStrNull})
	require.Equal(t, "pending", at(t, v, "status"))
	require.Nil(t, at(t, v, "errorMessage"))

	// §10.6 traces.
	v = get("/api/v1/traces/by-name/order-3?limit=50", map[string]string{"traces[].id": kStr,
		"traces[].transaction_id": kStr, "traces[].queue_name": kStr, "traces[].partition_name": kStr,
		"traces[].event_type": kStr, "traces[].consumer_group": kStr, "traces[].worker_id": kStr,
		"traces[].created_at": kStr, "traces[].data.text": kStr, "traces[].trace_names": kArr, "total": kNum})
	require.EqualValues(t, 1, at(t, v, "total"))

	// §10.7 consumers.
	v = get("/api/v1/consumer-groups/lagging?minLagSeconds=60", map[string]string{})
	require.IsType(t, []any{}, v)

	// §10.8 analytics.
	get("/api/v1/status/queues?limit=500", map[string]string{"queues[].name": kStr, "queues[].namespace": kStr,
		"queues[].task": kStr, "queues[].messages.total": kNum, "queues[].messages.pending": kNum,
		"queues[].messages.processing": kNum, "queues[].messages.completed": kNum})
	get("/api/v1/resources/namespaces", map[string]string{"namespaces[].namespace": kStr})
	get("/api/v1/resources/tasks", map[string]string{"tasks[].task": kStr})

	// §10.9 dead letter.
	v = get("/api/v1/dlq", map[string]string{"messages[].id": kStr, "messages[].transactionId": kStr,
		"messages[].partitionId": kStr, "messages[].queue": kStr, "messages[].consumerGroup": kStr,
		"messages[].errorMessage": kStr, "messages[].retryCount": kNum, "messages[].failedAt": kStr,
		"messages[].data": kObj})
	require.Equal(t, "o-2", at(t, v, "messages[].transactionId"))

	// §10.10 operations.
	v = get("/api/v1/analytics/worker-metrics?"+rng, map[string]string{"timeSeries[].timestamp": kStr,
		"timeSeries[].pushPerSecond": kNum, "timeSeries[].popPerSecond": kNum, "timeSeries[].ackPerSecond": kNum,
		"timeSeries[].avgEventLoopLagMs": kNumNull, "timeSeries[].maxEventLoopLagMs": kNumNull,
		"timeSeries[].avgFreeSlots": kNumNull, "timeSeries[].dbConnections": kNumNull,
		"timeSeries[].avgJobQueueSize": kNumNull, "timeSeries[].maxJobQueueSize": kNumNull,
		"timeSeries[].avgLagMs": kNumNull, "timeSeries[].maxLagMs": kNumNull, "timeSeries[].dbErrors": kNum,
		"timeSeries[].ackFailed": kNum, "timeSeries[].dlqCount": kNum, "bucketMinutes": kNum,
		"workers[].hostname": kStr, "workers[].workerId": kNum, "workers[].avgEventLoopLagMs": kNumNull,
		"workers[].maxEventLoopLagMs": kNumNull, "workers[].freeSlots": kNum, "workers[].dbConnections": kNum,
		"workers[].jobQueueSize": kNum, "workers[].lastSeen": kStr})
	var dlqCount float64
	for _, x := range lookup(t, "worker-metrics", v, "timeSeries[].dlqCount") {
		dlqCount += x.(float64)
	}
	require.EqualValues(t, 1, dlqCount)
	v = get("/api/v1/analytics/queue-lag?"+rng, map[string]string{"[].queueName": kStr, "[].bucketTime": kStr,
		"[].popCount": kNum, "[].avgLagMs": kNum, "[].maxLagMs": kNum})
	require.Equal(t, q, at(t, lookup(t, "queue-lag", v, "[]")[0], "queueName"))
	get("/api/v1/analytics/queue-parked-replicas?"+rng, map[string]string{"series": kArr, "replicas": kArr,
		"bucketMinutes": kNum})

	// §10.11 system.
	get("/api/v1/analytics/postgres-stats", map[string]string{"database": kStr,
		"databaseCache.cacheHitRatio": kNumNull, "cacheSummary.tables.hitRatio": kNumNull,
		"cacheSummary.indexes.hitRatio": kNumNull, "tableCache": kArr, "indexCache": kArr,
		"bufferConfig.sharedBuffersSize": kStr, "bufferUsage": kArr, "tableSizes[].table": kStr,
		"tableSizes[].totalSize": kStr, "tableSizes[].tableSize": kStr, "tableSizes[].indexSize": kStr,
		"deadTuples[].table": kStr, "deadTuples[].deadTuples": kNum, "deadTuples[].deadPercentage": kNumNull,
		"deadTuples[].lastVacuum": kAny, "deadTuples[].lastAutovacuum": kAny, "hotUpdates": kArr,
		"activeQueries": kArr, "autovacuumStatus": kArr})

	// §10.12 migration: not supported, degrading cleanly.
	get("/api/v1/migration/status", map[string]string{"status": kStr, "currentStep": kStr, "elapsedSeconds": kNum})
	for _, p := range []string{"test-connection", "start", "validate", "reset"} {
		status, body := do(t, "POST", b.URL+"/api/v1/migration/"+p, map[string]any{})
		require.Equal(t, http.StatusNotImplemented, status, "%s: %s", p, body)
		checkFields(t, p, body, map[string]string{"error": kStr})
	}
	// Retry and move-to-DLQ by hand: the UI shows the error.
	status, body = do(t, "POST", b.URL+"/api/v1/messages/"+pid+"/o-3/dlq", nil)
	require.Equal(t, http.StatusNotImplemented, status, "%s", body)
	checkFields(t, "dlq by hand", body, map[string]string{"error": kStr})
}
