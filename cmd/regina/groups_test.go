package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type groupRow struct {
	Name                  string   `json:"name"`
	Topics                []string `json:"topics"`
	QueueName             string   `json:"queueName"`
	Members               int      `json:"members"`
	PartitionsWithLag     int      `json:"partitionsWithLag"`
	TotalLag              int64    `json:"totalLag"`
	MaxTimeLag            int64    `json:"maxTimeLag"`
	State                 string   `json:"state"`
	SubscriptionMode      *string  `json:"subscriptionMode"`
	SubscriptionTimestamp *string  `json:"subscriptionTimestamp"`
	SubscriptionCreatedAt *string  `json:"subscriptionCreatedAt"`
}

type laggingRow struct {
	ConsumerGroup      string  `json:"consumer_group"`
	QueueName          string  `json:"queue_name"`
	PartitionName      string  `json:"partition_name"`
	PartitionID        string  `json:"partition_id"`
	WorkerID           *string `json:"worker_id"`
	OffsetLag          int64   `json:"offset_lag"`
	TimeLagSeconds     int64   `json:"time_lag_seconds"`
	LagHours           float64 `json:"lag_hours"`
	OldestUnconsumedAt *string `json:"oldest_unconsumed_at"`
	LastConsumedAt     string  `json:"last_consumed_at"`
}

type groupDetail map[string]struct {
	Partitions []struct {
		Partition      string  `json:"partition"`
		WorkerID       *string `json:"workerId"`
		LastConsumedAt string  `json:"lastConsumedAt"`
		TotalConsumed  int64   `json:"totalConsumed"`
		OffsetLag      int64   `json:"offsetLag"`
		TimeLagSeconds int64   `json:"timeLagSeconds"`
		LeaseActive    bool    `json:"leaseActive"`
	} `json:"partitions"`
}

func (b *testBroker) post(t *testing.T, path string, body any) (int, map[string]any) {
	t.Helper()
	status, raw := do(t, "POST", b.URL+path, body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
	return status, out
}

// Every consumer-group view and action of the parity page, through HTTP.
//
//nolint:tparallel // the subtests act on one state in order
func TestConsumerGroupViews(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)

	var empty []groupRow
	getJSON(t, b.URL+"/api/v1/consumer-groups", &empty)
	require.Equal(t, []groupRow{}, empty, "no groups: [] (upstream sends no body)")

	pushN(t, b, "orders", "eu", 0, 3)
	pushN(t, b, "orders", "us", 0, 2)
	// audit: everything of eu consumed, one of us leased.
	b.pop(t, "orders", "eu", url.Values{"consumerGroup": {"audit"}, "batch": {"10"}, "autoAck": {"true"}})
	leased := b.pop(t, "orders", "us", url.Values{"consumerGroup": {"audit"}})
	// Queue mode consumed one of eu.
	qm := b.pop(t, "orders", "eu", nil)
	b.ack(t, qm.Messages[0], "completed", "")
	// late: a "new" subscription, nothing delivered since.
	b.pop(t, "orders", "eu", url.Values{"consumerGroup": {"late"}, "subscriptionMode": {"new"}})
	// us's messages are 10 minutes old.
	d.exec(t, `UPDATE queen.segments s SET created_at = s.created_at - interval '600 seconds'
		FROM queen.partitions p WHERE p.id = s.partition_id AND p.name = 'us'`)

	var rows []groupRow
	getJSON(t, b.URL+"/api/v1/consumer-groups", &rows)
	require.Len(t, rows, 3)
	byName := map[string]groupRow{}
	for _, r := range rows {
		byName[r.Name] = r
		require.Equal(t, []string{"orders"}, r.Topics)
		require.Equal(t, "orders", r.QueueName)
	}
	require.Equal(t, []string{"__QUEUE_MODE__", "audit", "late"}, []string{rows[0].Name, rows[1].Name, rows[2].Name})

	audit := byName["audit"]
	require.Equal(t, 2, audit.Members)
	require.Equal(t, 1, audit.PartitionsWithLag, "us: its leased message is not consumed yet")
	require.Equal(t, int64(2), audit.TotalLag)
	require.GreaterOrEqual(t, audit.MaxTimeLag, int64(600))
	require.Equal(t, "Lagging", audit.State)
	require.Nil(t, audit.SubscriptionMode)

	queueMode := byName["__QUEUE_MODE__"]
	require.Equal(t, 1, queueMode.Members)
	require.Equal(t, int64(2), queueMode.TotalLag)
	require.Less(t, queueMode.MaxTimeLag, int64(300))
	require.Equal(t, "Stable", queueMode.State)

	late := byName["late"]
	require.Equal(t, 1, late.Members)
	require.Zero(t, late.TotalLag)
	require.Equal(t, "Dead", late.State, "its cursor never delivered anything")
	require.NotNil(t, late.SubscriptionMode)
	require.Equal(t, "new", *late.SubscriptionMode)
	require.NotNil(t, late.SubscriptionTimestamp)
	require.Equal(t, *late.SubscriptionTimestamp, *late.SubscriptionCreatedAt)

	t.Run("lagging", func(t *testing.T) {
		var lag []laggingRow
		getJSON(t, b.URL+"/api/v1/consumer-groups/lagging?minLagSeconds=300", &lag)
		require.Len(t, lag, 1)
		r := lag[0]
		require.Equal(t, "audit", r.ConsumerGroup)
		require.Equal(t, "orders", r.QueueName)
		require.Equal(t, "us", r.PartitionName)
		require.Equal(t, leased.PartitionID, r.PartitionID)
		require.NotNil(t, r.WorkerID)
		require.Equal(t, leased.LeaseID, *r.WorkerID, "worker_id is the live lease")
		require.Equal(t, int64(2), r.OffsetLag)
		require.GreaterOrEqual(t, r.TimeLagSeconds, int64(600))
		require.InDelta(t, float64(r.TimeLagSeconds)/3600, r.LagHours, 0.01)
		require.NotNil(t, r.OldestUnconsumedAt)

		getJSON(t, b.URL+"/api/v1/consumer-groups/lagging", &lag)
		require.Equal(t, []laggingRow{}, lag, "default 3600 s: nothing that old")
		for _, bad := range []string{"abc", "1.5", "-1"} {
			status, body := do(t, "GET", b.URL+"/api/v1/consumer-groups/lagging?minLagSeconds="+bad, nil)
			require.Equal(t, http.StatusBadRequest, status, "%s: %s", bad, body)
		}
	})

	t.Run("detail", func(t *testing.T) {
		var g groupDetail
		getJSON(t, b.URL+"/api/v1/consumer-groups/audit", &g)
		require.Len(t, g, 1)
		ps := g["orders"].Partitions
		require.Len(t, ps, 2)
		require.Equal(t, "eu", ps[0].Partition)
		require.Equal(t, int64(3), ps[0].TotalConsumed)
		require.Zero(t, ps[0].OffsetLag)
		require.Zero(t, ps[0].TimeLagSeconds)
		require.False(t, ps[0].LeaseActive)
		require.Nil(t, ps[0].WorkerID)
		require.Equal(t, "us", ps[1].Partition)
		require.Equal(t, int64(2), ps[1].OffsetLag)
		require.GreaterOrEqual(t, ps[1].TimeLagSeconds, int64(600))
		require.True(t, ps[1].LeaseActive)
		require.Equal(t, leased.LeaseID, *ps[1].WorkerID)
		_, err := time.Parse("2006-01-02T15:04:05.000Z", ps[1].LastConsumedAt)
		require.NoError(t, err)

		status, body := do(t, "GET", b.URL+"/api/v1/consumer-groups/nobody", nil)
		require.Equal(t, http.StatusOK, status)
		require.JSONEq(t, `{}`, string(body))
	})

	t.Run("seek", func(t *testing.T) {
		pushN(t, b, "orders", "asia", 0, 2) // audit never read asia
		status, out := b.post(t, "/api/v1/consumer-groups/audit/queues/orders/seek", map[string]any{"toEnd": true})
		require.Equal(t, http.StatusOK, status, "%v", out)
		require.Equal(t, map[string]any{"success": true, "consumerGroup": "audit", "queueName": "orders", "queue": "orders",
			"seekToEnd": true, "targetTimestamp": nil, "partitionsUpdated": float64(2)}, out)
		// us's lease is gone and nothing of us is left.
		var g groupDetail
		getJSON(t, b.URL+"/api/v1/consumer-groups/audit", &g)
		require.False(t, g["orders"].Partitions[1].LeaseActive)
		require.Empty(t, b.pop(t, "orders", "us", url.Values{"consumerGroup": {"audit"}}).Messages)
		// asia follows the subscription on its first pop: from the beginning.
		require.Len(t, b.pop(t, "orders", "asia", url.Values{"consumerGroup": {"audit"}, "batch": {"5"},
			"autoAck": {"true"}}).Messages, 2)

		// A time before everything: every message of the group's partitions again.
		ts := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
		status, out = b.post(t, "/api/v1/consumer-groups/audit/queues/orders/seek",
			map[string]any{"timestamp": ts.Format(time.RFC3339Nano)})
		require.Equal(t, http.StatusOK, status, "%v", out)
		require.Equal(t, false, out["seekToEnd"])
		require.Equal(t, ts.Format("2006-01-02T15:04:05.000Z"), out["targetTimestamp"])
		require.Equal(t, float64(3), out["partitionsUpdated"])
		require.Len(t, b.pop(t, "orders", "us", url.Values{"consumerGroup": {"audit"}, "batch": {"5"},
			"autoAck": {"true"}}).Messages, 2)

		// Both: toEnd wins.
		status, out = b.post(t, "/api/v1/consumer-groups/audit/queues/orders/seek",
			map[string]any{"toEnd": true, "timestamp": ts.Format(time.RFC3339)})
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, true, out["seekToEnd"])
		require.Empty(t, b.pop(t, "orders", "eu", url.Values{"consumerGroup": {"audit"}}).Messages)

		for _, c := range []struct {
			body any
			want string
		}{
			{map[string]any{}, "Must specify either 'toEnd': true or 'timestamp'"},
			{map[string]any{"toEnd": false}, "Must specify either"},
			{map[string]any{"toEnd": "yes"}, "toEnd must be a boolean"},
			{map[string]any{"timestamp": "yesterday"}, "timestamp must be an RFC 3339 timestamp"},
			{map[string]any{"timestamp": 5}, "timestamp must be"},
		} {
			status, out := b.post(t, "/api/v1/consumer-groups/audit/queues/orders/seek", c.body)
			require.Equal(t, http.StatusBadRequest, status, "%v", c.body)
			require.Contains(t, out["error"], c.want)
		}
		status, out = b.post(t, "/api/v1/consumer-groups/audit/queues/nope/seek", map[string]any{"toEnd": true})
		require.Equal(t, http.StatusNotFound, status)
		require.Equal(t, "Queue not found", out["error"])
	})

	t.Run("seek one partition", func(t *testing.T) {
		pushN(t, b, "orders", "eu", 3, 2)
		status, out := b.post(t, "/api/v1/consumer-groups/audit/queues/orders/partitions/eu/seek", nil)
		require.Equal(t, http.StatusOK, status, "%v", out)
		require.Equal(t, true, out["updated"])
		require.Equal(t, "eu", out["partitionName"])
		require.Equal(t, "orders", out["queueName"])
		moved, err := time.Parse("2006-01-02T15:04:05.000Z", out["cursorMovedTo"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), moved, time.Minute, "the newest message's time")
		require.Empty(t, b.pop(t, "orders", "eu", url.Values{"consumerGroup": {"audit"}}).Messages)

		// A group without a cursor there: nothing to move.
		status, out = b.post(t, "/api/v1/consumer-groups/late/queues/orders/partitions/us/seek", map[string]any{"toEnd": true})
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, false, out["updated"])
		status, out = b.post(t, "/api/v1/consumer-groups/audit/queues/orders/partitions/nope/seek", nil)
		require.Equal(t, http.StatusNotFound, status)
		require.Equal(t, "Partition not found", out["error"])
	})

	t.Run("subscription and deletes", func(t *testing.T) {
		ts := "2026-01-01T00:00:00Z"
		status, out := b.post(t, "/api/v1/consumer-groups/late/subscription", map[string]any{"subscriptionTimestamp": ts})
		require.Equal(t, http.StatusOK, status, "%v", out)
		require.Equal(t, ts, out["newTimestamp"])
		require.Equal(t, float64(1), out["rowsUpdated"])
		var rows []groupRow
		getJSON(t, b.URL+"/api/v1/consumer-groups", &rows)
		for _, r := range rows {
			if r.Name == "late" {
				require.Equal(t, "timestamp", *r.SubscriptionMode, "moved: no longer the time it was first seen")
				require.Equal(t, "2026-01-01T00:00:00.000Z", *r.SubscriptionTimestamp)
			}
		}

		status, raw := do(t, "DELETE", b.URL+"/api/v1/consumer-groups/audit/queues/orders?deleteMetadata=false", nil)
		require.Equal(t, http.StatusOK, status)
		require.JSONEq(t, `{"success":true,"consumerGroup":"audit","queueName":"orders","queue":"orders",
			"deletedPartitions":3,"metadataDeleted":false}`, string(raw))
		status, raw = do(t, "DELETE", b.URL+"/api/v1/consumer-groups/late", nil)
		require.Equal(t, http.StatusOK, status)
		require.JSONEq(t, `{"success":true,"consumerGroup":"late","deletedPartitions":1,"metadataDeleted":true}`, string(raw))
		status, raw = do(t, "DELETE", b.URL+"/api/v1/consumer-groups/nobody", nil)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, string(raw), `"deletedPartitions":0`)
		getJSON(t, b.URL+"/api/v1/consumer-groups", &rows)
		require.Len(t, rows, 1)
		require.Equal(t, "__QUEUE_MODE__", rows[0].Name)
	})
}
