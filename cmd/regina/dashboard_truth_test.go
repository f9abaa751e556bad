package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/reginatype"
)

// The figures Queen's dashboard shows, checked against a known seeding
// (issue 30): every dead letter reachable, message statuses per filter,
// zero buckets once traffic stops, refused acks apart from failed ones, the
// Operations view's partition count, event-loop and job-queue figures.

// getView GETs path and requires a 200 with fields of the given kinds.
func getView(t *testing.T, b *testBroker, path string, fields map[string]string) any {
	t.Helper()
	status, body := do(t, "GET", b.URL+path, nil)
	require.Equal(t, http.StatusOK, status, "GET %s: %s", path, body)
	return checkFields(t, "GET "+path, body, fields)
}

// sumOf adds the numbers at path.
func sumOf(t *testing.T, v any, path string) float64 {
	t.Helper()
	var n float64
	for _, x := range lookup(t, path, v, path) {
		f, ok := x.(float64)
		require.True(t, ok, "%s: %v is not a number", path, x)
		n += f
	}
	return n
}

// TestDashboardDLQWhole: the dead-letter view asks for GET /api/v1/dlq with
// no limit and has no paging; every dead letter must come back.
func TestDashboardDLQWhole(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	const q = "dash.dlq"
	pushN(t, b, q, "p", 0, 140)
	pop := b.pop(t, q, "p", url.Values{"batch": {"140"}})
	require.Len(t, pop.Messages, 140)
	for _, r := range b.ackBatch(t, pop.Messages, "dlq", "") {
		require.True(t, r.Success)
		require.True(t, r.DLQ)
	}
	v := getView(t, b, "/api/v1/dlq", map[string]string{"messages[].transactionId": kStr, "total": kNum})
	require.EqualValues(t, 140, at(t, v, "total"))
	ids := map[any]bool{}
	for _, x := range lookup(t, "dlq", v, "messages[].transactionId") {
		ids[x] = true
	}
	require.Len(t, ids, 140, "every dead letter, once")
	v = getView(t, b, "/api/v1/dlq?limit=50&offset=100", map[string]string{"messages": kArr, "total": kNum})
	require.Len(t, at(t, v, "messages"), 40, "paging still works")
	require.EqualValues(t, 140, at(t, v, "total"))
}

// TestDashboardMessageStatus seeds a queue mode partition (completed, dead
// letter, two under a live lease, pending) and a partition only named
// groups read (one message both groups passed, two one group has not),
// and checks the list per status filter against the detail view.
func TestDashboardMessageStatus(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	const q = "dash.status"
	b.configure(t, q, map[string]any{"leaseTime": 300})
	pushN(t, b, q, "qm", 0, 5) // dash.status-qm-0..4
	pushN(t, b, q, "bus", 0, 3)
	pop := b.pop(t, q, "qm", url.Values{"batch": {"2"}})
	require.Len(t, pop.Messages, 2)
	require.True(t, b.ack(t, pop.Messages[0], "completed", "").Success)
	require.True(t, b.ack(t, pop.Messages[1], "dlq", "").DLQ)
	require.Len(t, b.pop(t, q, "qm", url.Values{"batch": {"2"}}).Messages, 2) // qm-2, qm-3 leased
	require.Len(t, b.pop(t, q, "bus", url.Values{"batch": {"3"}, "consumerGroup": {"g1"},
		"autoAck": {"true"}}).Messages, 3)
	require.Len(t, b.pop(t, q, "bus", url.Values{"batch": {"1"}, "consumerGroup": {"g2"},
		"autoAck": {"true"}}).Messages, 1)

	fields := map[string]string{"messages": kArr, "total": kNum}
	list := func(status string) []string {
		t.Helper()
		path := "/api/v1/messages?limit=100&queue=" + q
		if status != "" {
			path += "&status=" + status
		}
		v := getView(t, b, path, fields)
		var got []string
		for _, m := range at(t, v, "messages").([]any) {
			mm := m.(map[string]any)
			if status != "" {
				require.Equal(t, status, mm["status"], "%v", mm)
			}
			got = append(got, mm["transactionId"].(string))
		}
		sort.Strings(got)
		require.EqualValues(t, len(got), at(t, v, "total"), "total counts what the filter selects")
		return got
	}
	require.Equal(t, []string{"dash.status-bus-0", "dash.status-qm-0"}, list("completed"))
	require.Equal(t, []string{"dash.status-qm-1"}, list("dead_letter"))
	require.Equal(t, []string{"dash.status-qm-2", "dash.status-qm-3"}, list("processing"))
	require.Equal(t, []string{"dash.status-bus-1", "dash.status-bus-2", "dash.status-qm-4"}, list("pending"))
	require.Len(t, list(""), 8)

	// The list and the detail agree, message by message.
	v := getView(t, b, "/api/v1/messages?limit=100&queue="+q, map[string]string{"messages[].status": kStr,
		"messages[].partitionId": kStr, "mode.type": kStr, "mode.busGroupsCount": kNum})
	require.Equal(t, "hybrid", at(t, v, "mode.type"))
	require.EqualValues(t, 2, at(t, v, "mode.busGroupsCount"))
	for _, m := range at(t, v, "messages").([]any) {
		mm := m.(map[string]any)
		d := getView(t, b, "/api/v1/messages/"+mm["partitionId"].(string)+"/"+mm["transactionId"].(string),
			map[string]string{"status": kStr})
		require.Equal(t, mm["status"], at(t, d, "status"), "%s", mm["transactionId"])
	}

	// Paging inside a status.
	v = getView(t, b, "/api/v1/messages?queue="+q+"&status=pending&limit=2", fields)
	require.Len(t, at(t, v, "messages"), 2)
	require.EqualValues(t, 3, at(t, v, "total"))
	v = getView(t, b, "/api/v1/messages?queue="+q+"&status=pending&limit=2&offset=2", fields)
	require.Len(t, at(t, v, "messages"), 1)
	// A bus-only queue reads as bus mode.
	v = getView(t, b, "/api/v1/messages?queue="+q+"&partition=bus", map[string]string{"mode.type": kStr})
	require.Equal(t, "hybrid", at(t, v, "mode.type"), "mode is the queue's, whatever the partition filter")

	status, body := do(t, "GET", b.URL+"/api/v1/messages?status=failed", nil)
	require.Equal(t, http.StatusBadRequest, status, "%s", body)
	checkFields(t, "bad status", body, map[string]string{"error": kStr})
}

// TestDashboardRefusedAcks acks a batch of four where the second fails:
// its lease is released, so the last two are refused (and delivered
// again); an ack naming a lease another pop replaced fails. The views and
// Prometheus count 2 refused and 1 failed, not 3 failed.
func TestDashboardRefusedAcks(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.statsFlush = 100 * time.Millisecond })
	const q = "dash.refused"
	b.configure(t, q, map[string]any{"retryLimit": 3})
	pushN(t, b, q, "p", 0, 4)
	pop := b.pop(t, q, "p", url.Values{"batch": {"4"}})
	require.Len(t, pop.Messages, 4)
	acks := []any{}
	for i, m := range pop.Messages {
		st := "completed"
		if i == 1 {
			st = "failed"
		}
		acks = append(acks, map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID,
			"leaseId": m.LeaseID, "status": st})
	}
	code, body := do(t, "POST", b.URL+"/api/v1/ack/batch", map[string]any{"acknowledgments": acks})
	require.Equal(t, http.StatusOK, code, "%s", body)
	var rs []ackResult
	require.NoError(t, json.Unmarshal(body, &rs))
	require.Equal(t, []bool{true, true, false, false}, []bool{rs[0].Success, rs[1].Success, rs[2].Success, rs[3].Success})
	require.Equal(t, "Invalid or expired lease", *rs[2].Error)

	again := b.pop(t, q, "p", url.Values{"batch": {"4"}}) // the failed one and the refused ones
	require.Len(t, again.Messages, 3)
	require.Equal(t, pop.Messages[1].TransactionID, again.Messages[0].TransactionID)
	stale := b.ack(t, pop.Messages[1], "completed", "") // the first lease: replaced, not released
	require.False(t, stale.Success)
	for _, r := range b.ackBatch(t, again.Messages, "completed", "") {
		require.True(t, r.Success)
	}

	var v any
	require.Eventually(t, func() bool {
		_, body := do(t, "GET", b.URL+"/api/v1/analytics/queue-ops?queue="+q, nil)
		if json.Unmarshal(body, &v) != nil {
			return false
		}
		s, _ := v.(map[string]any)["series"].([]any)
		var ok float64
		for _, x := range s {
			ok += x.(map[string]any)["ackSuccess"].(float64)
		}
		return ok == 5
	}, 30*time.Second, 50*time.Millisecond, "queue-ops never showed the 5 applied acks")
	row := map[string]string{"series[].ackFailed": kNum, "series[].ackRefused": kNum, "series[].ackSuccess": kNum}
	v = getView(t, b, "/api/v1/analytics/queue-ops?queue="+q, row)
	require.EqualValues(t, 1, sumOf(t, v, "series[].ackFailed"))
	require.EqualValues(t, 2, sumOf(t, v, "series[].ackRefused"))
	v = getView(t, b, "/api/v1/status?queue="+q, map[string]string{"throughput[].ackFailed": kNum,
		"throughput[].ackRefused": kNum, "throughput[].processed": kNum, "errors.ackFailed": kNum,
		"errors.ackRefused": kNum})
	require.EqualValues(t, 1, sumOf(t, v, "throughput[].ackFailed"))
	require.EqualValues(t, 2, sumOf(t, v, "throughput[].ackRefused"))
	require.EqualValues(t, 6, sumOf(t, v, "throughput[].processed"), "applied and failed acks; refused ones are not")
	require.EqualValues(t, 1, at(t, v, "errors.ackFailed"))
	require.EqualValues(t, 2, at(t, v, "errors.ackRefused"))
	v = getView(t, b, "/api/v1/analytics/worker-metrics", map[string]string{"timeSeries[].ackFailed": kNum,
		"timeSeries[].ackRefused": kNum, "summary.totalAckFailed": kNum, "summary.totalAckRefused": kNum})
	require.EqualValues(t, 1, sumOf(t, v, "timeSeries[].ackFailed"))
	require.EqualValues(t, 2, sumOf(t, v, "timeSeries[].ackRefused"))
	require.EqualValues(t, 2, at(t, v, "summary.totalAckRefused"))

	_, prom := do(t, "GET", b.URL+"/metrics/prometheus", nil)
	for result, n := range map[string]int{"success": 5, "failed": 1, "refused": 2} {
		line := fmt.Sprintf(`regina_ack_results_total{queue=%q,result=%q} %d`, q, result, n)
		require.Contains(t, string(prom), line+"\n")
	}
}

// seedMinutes writes, as brokers would have, the counters and process
// samples of a past time range: a broker "b1:6632" running 10:00-10:09 UTC
// on 2024-03-01 (a sample every minute), and traffic on queue q in 10:02
// only: 120 pushed, 60 delivered, 60 acked.
func seedMinutes(t *testing.T, d *db, q string) time.Time {
	t.Helper()
	base := time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC)
	var smp reginatype.SystemSample
	for _, v := range []float64{0.02, 0.04} {
		smp.SchedLatencyMs.Observe(v)
	}
	smp.SchedLatencyP99Ms.Observe(0.5)
	smp.SchedLatencyP99Ms.Observe(1.5)
	smp.MailboxDepth.Observe(0)
	smp.MailboxPeak.Observe(40)
	smp.PoolMax.Observe(10)
	smp.PoolActive.Observe(2)
	js, err := json.Marshal(&smp)
	require.NoError(t, err)
	for m := range 10 {
		d.exec(t, `INSERT INTO queen.system_minutes (minute, instance, sample) VALUES ($1, 'b1:6632', $2)`,
			base.Add(time.Duration(m)*time.Minute), js)
	}
	d.exec(t, `INSERT INTO queen.stats_minutes (minute, instance, queue, push_requests, push_messages,
	        pop_requests, pop_messages, ack_requests, ack_success, lag_count, lag_sum_ms, lag_max_ms)
	        VALUES ($1, 'b1:6632', $2, 4, 120, 6, 60, 6, 60, 60, 600, 30),
	               ($1, 'b1:6632', '', 4, 0, 6, 0, 6, 0, 0, 0, 0)`, base.Add(2*time.Minute), q)
	return base
}

// TestDashboardZeroBuckets: the time series list every bucket a broker ran
// in, with zeros where nothing was served, so the dashboard's "now" (the
// newest closed bucket) falls to 0 once traffic stops; buckets where no
// broker ran stay absent.
func TestDashboardZeroBuckets(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	const q = "dash.zero"
	b.configure(t, q, nil) // its Default partition: created now, after the seeded range
	d := newDB(t, b.Schema)
	base := seedMinutes(t, d, q)
	// Two partitions that existed before the range, one created in 10:05.
	d.exec(t, `INSERT INTO queen.partitions (queue_id, name, created_at)
	           SELECT id, 'old-' || i, $2 FROM queen.queues, generate_series(1, 2) i WHERE name = $1`,
		q, base.Add(-time.Hour))
	d.exec(t, `INSERT INTO queen.partitions (queue_id, name, created_at)
	           SELECT id, 'new', $2 FROM queen.queues WHERE name = $1`, q, base.Add(5*time.Minute+time.Second))
	rng := "from=" + url.QueryEscape(base.Format(time.RFC3339)) + "&to=" +
		url.QueryEscape(base.Add(10*time.Minute).Format(time.RFC3339))
	minute := func(m int) string { return base.Add(time.Duration(m) * time.Minute).Format("2006-01-02T15:04:05Z") }

	// Dashboard: /api/v1/status throughput, newest first.
	v := getView(t, b, "/api/v1/status?"+rng, map[string]string{"throughput[].timestamp": kStr,
		"throughput[].ingestedPerSecond": kNum, "throughput[].popPerSecond": kNum, "bucketMinutes": kNum,
		"throughput[].avgEventLoopLagMs": kNum, "throughput[].maxEventLoopLagMs": kNum})
	rows := lookup(t, "status", v, "throughput[]")
	require.Len(t, rows, 10, "one bucket per minute the broker ran")
	for i, r := range rows {
		rr := r.(map[string]any)
		require.Equal(t, minute(9-i), rr["timestamp"])
		want := 0.0
		if i == 7 { // 10:02
			want = 2
		}
		require.EqualValues(t, want, rr["ingestedPerSecond"], "%s", rr["timestamp"])
	}
	now := rows[1].(map[string]any) // the dashboard drops the newest, still open, bucket
	require.EqualValues(t, 0, now["ingestedPerSecond"])
	require.EqualValues(t, 0, now["popPerSecond"])
	require.EqualValues(t, 0.03, now["avgEventLoopLagMs"], "the mean of the per-second means, ms")
	require.EqualValues(t, 1.5, now["maxEventLoopLagMs"], "the highest per-second p99, ms")

	// Queue detail and Operations: queue-ops, oldest first, one row per
	// (bucket, queue), with the partitions the queue had then.
	v = getView(t, b, "/api/v1/analytics/queue-ops?"+rng+"&queue="+q, map[string]string{"series[].bucket": kStr,
		"series[].pushPerSecond": kNum, "series[].popPerSecond": kNum, "series[].partitionCount": kNum,
		"series[].partitionsCreated": kNum})
	rows = lookup(t, "queue-ops", v, "series[]")
	require.Len(t, rows, 10)
	for i, r := range rows {
		rr := r.(map[string]any)
		require.Equal(t, minute(i), rr["bucket"])
		require.Equal(t, q, rr["queueName"])
		want, parts, made := 0.0, 2.0, 0.0
		if i == 2 {
			want = 2
		}
		if i >= 5 {
			parts = 3
		}
		if i == 5 {
			made = 1
		}
		require.EqualValues(t, want, rr["pushPerSecond"], "%s", rr["bucket"])
		require.EqualValues(t, want/2, rr["popPerSecond"], "%s", rr["bucket"])
		require.EqualValues(t, parts, rr["partitionCount"], "%s", rr["bucket"])
		require.EqualValues(t, made, rr["partitionsCreated"], "%s", rr["bucket"])
	}
	// The same without the queue filter (the Queues and Operations views).
	v = getView(t, b, "/api/v1/analytics/queue-ops?"+rng, map[string]string{"series[].bucket": kStr})
	require.Len(t, lookup(t, "queue-ops", v, "series[]"), 10)
	require.Equal(t, []any{q}, at(t, v, "queues"))

	// Operations: worker-metrics, newest first.
	v = getView(t, b, "/api/v1/analytics/worker-metrics?"+rng, map[string]string{"timeSeries[].timestamp": kStr,
		"timeSeries[].pushPerSecond": kNum, "timeSeries[].avgEventLoopLagMs": kNum,
		"timeSeries[].maxEventLoopLagMs": kNum, "timeSeries[].avgJobQueueSize": kNum,
		"timeSeries[].maxJobQueueSize": kNum})
	rows = lookup(t, "worker-metrics", v, "timeSeries[]")
	require.Len(t, rows, 10)
	require.Equal(t, minute(9), rows[0].(map[string]any)["timestamp"])
	require.EqualValues(t, 0, rows[1].(map[string]any)["pushPerSecond"])
	require.EqualValues(t, 2, rows[7].(map[string]any)["pushPerSecond"])
	require.EqualValues(t, 40, rows[1].(map[string]any)["maxJobQueueSize"], "the per-second peak")
	require.EqualValues(t, 0, rows[1].(map[string]any)["avgJobQueueSize"], "the depth at each sampling instant")

	// Five-minute buckets: 10:00 and 10:05 only; no broker ran after 10:09.
	wide := "from=" + url.QueryEscape(base.Format(time.RFC3339)) + "&to=" +
		url.QueryEscape(base.Add(90*time.Minute).Format(time.RFC3339))
	v = getView(t, b, "/api/v1/status?"+wide, map[string]string{"bucketMinutes": kNum,
		"throughput[].ingested": kNum, "throughput[].ingestedPerSecond": kNum})
	require.EqualValues(t, 5, at(t, v, "bucketMinutes"))
	rows = lookup(t, "status", v, "throughput[]")
	require.Len(t, rows, 2)
	require.EqualValues(t, 0, rows[0].(map[string]any)["ingested"])
	require.EqualValues(t, 120, rows[1].(map[string]any)["ingested"])
	require.EqualValues(t, 0.4, rows[1].(map[string]any)["ingestedPerSecond"], "120 over 300 s")
}

// TestDashboardOperationsLive drives a broker and checks that the
// Operations view has no blank panel: event-loop lag (the scheduler's
// latency), the job queue (the mailboxes' peak) and the partition count.
func TestDashboardOperationsLive(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) {
		c.statsFlush = 100 * time.Millisecond
		c.MetricsSampleInterval = 100 * time.Millisecond
	})
	const q = "dash.ops"
	for _, p := range []string{"a", "b", "c"} {
		pushN(t, b, q, p, 0, 50)
	}
	var v any
	require.Eventually(t, func() bool {
		_, body := do(t, "GET", b.URL+"/api/v1/analytics/worker-metrics", nil)
		if json.Unmarshal(body, &v) != nil {
			return false
		}
		ts, _ := v.(map[string]any)["timeSeries"].([]any)
		var lag, peak bool
		for _, x := range ts {
			m := x.(map[string]any)
			_, lag1 := m["maxEventLoopLagMs"].(float64)
			lag = lag || lag1
			n, _ := m["maxJobQueueSize"].(float64)
			peak = peak || n >= 50
		}
		return lag && peak
	}, 30*time.Second, 50*time.Millisecond, "worker-metrics never showed event-loop lag and a job queue of 50")
	v = getView(t, b, "/api/v1/analytics/worker-metrics", map[string]string{"workers[].avgEventLoopLagMs": kNum,
		"workers[].maxEventLoopLagMs": kNum, "workers[].jobQueueSize": kNum})
	require.GreaterOrEqual(t, at(t, v, "workers[].jobQueueSize").(float64), 50.0)
	// The partition count can show 3 a flush before the last pushes' counts
	// land: wait for both.
	require.Eventually(t, func() bool {
		_, body := do(t, "GET", b.URL+"/api/v1/analytics/queue-ops?queue="+q, nil)
		var ops struct {
			Series []struct {
				PushMessages float64 `json:"pushMessages"`
			} `json:"series"`
		}
		if !strings.Contains(string(body), `"partitionCount":3`) || json.Unmarshal(body, &ops) != nil {
			return false
		}
		var pushed float64
		for _, s := range ops.Series {
			pushed += s.PushMessages
		}
		return pushed == 150
	}, 30*time.Second, 50*time.Millisecond, "queue-ops never showed 3 partitions and 150 pushed messages")
	v = getView(t, b, "/api/v1/analytics/queue-ops?queue="+q, map[string]string{"series[].bucket": kStr})
	require.EqualValues(t, 150, sumOf(t, v, "series[].pushMessages"))
	rows := lookup(t, "queue-ops", v, "series[]")
	require.EqualValues(t, 3, rows[len(rows)-1].(map[string]any)["partitionCount"], "the newest bucket")
}
