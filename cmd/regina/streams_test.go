package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The streams v1 API (docs/streams.md), through HTTP, from the spec
// (queen-streams-api.md).

// post sends a streams request and decodes the JSON object answered.
func (b *testBroker) spost(t *testing.T, path string, body any) (int, map[string]any) {
	t.Helper()
	status, out := do(t, "POST", b.URL+path, body)
	var m map[string]any
	require.NoError(t, json.Unmarshal(out, &m), "%s answered %d %s", path, status, out)
	return status, m
}

// register registers a query and requires a 200.
func (b *testBroker) register(t *testing.T, name, source, hash string, reset bool) map[string]any {
	t.Helper()
	status, m := b.spost(t, "/streams/v1/queries", map[string]any{"name": name, "source_queue": source,
		"sink_queue": source + ".out", "config_hash": hash, "reset": reset})
	require.Equal(t, http.StatusOK, status, "%v", m)
	require.Equal(t, true, m["success"])
	return m
}

// cycle posts a cycle and requires a 200 (success or not: the body says).
func (b *testBroker) cycle(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	status, m := b.spost(t, "/streams/v1/cycle", body)
	require.Equal(t, http.StatusOK, status, "%v", m)
	return m
}

// state returns a shard's rows as key -> raw value (and the keys in order).
func (b *testBroker) state(t *testing.T, body map[string]any) (map[string]json.RawMessage, []string) {
	t.Helper()
	status, out := do(t, "POST", b.URL+"/streams/v1/state/get", body)
	require.Equal(t, http.StatusOK, status, "%s", out)
	var r struct {
		Success bool `json:"success"`
		Rows    []struct {
			Key       string          `json:"key"`
			Value     json.RawMessage `json:"value"`
			UpdatedAt string          `json:"updated_at"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(out, &r), "%s", out)
	require.True(t, r.Success)
	require.NotNil(t, r.Rows, "rows is always an array: %s", out)
	m := make(map[string]json.RawMessage)
	var keys []string
	for _, row := range r.Rows {
		require.NotEmpty(t, row.UpdatedAt)
		m[row.Key] = row.Value
		keys = append(keys, row.Key)
	}
	return m, keys
}

func shard(qid, pid string) map[string]any {
	return map[string]any{"query_id": qid, "partition_id": pid}
}

func TestStreamsRegistration(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)

	first := b.register(t, "clicks.per_user", "clicks", "h1", true)
	require.Equal(t, true, first["fresh"])
	require.Equal(t, false, first["reset"], "reset on a fresh name wipes nothing")
	require.Equal(t, "clicks.per_user", first["name"])
	require.Equal(t, "h1", first["config_hash"])
	qid := first["query_id"].(string)
	require.Len(t, qid, 36)

	// Some state in two partitions.
	pA, pB := "0193f0c2-5a7e-7c11-8d40-2b9e61a0c3f5", "0193f0c2-5a7e-7c11-8d40-2b9e61a0c3f6"
	for _, p := range []string{pA, pB} {
		body := shard(qid, p)
		body["state_ops"] = []map[string]any{{"type": "upsert", "key": "k", "value": map[string]any{"n": 1}}}
		require.Equal(t, true, b.cycle(t, body)["success"])
	}

	// Same hash, with reset: nothing wiped; source and sink updated.
	same := b.register(t, "clicks.per_user", "clicks2", "h1", true)
	require.Equal(t, qid, same["query_id"])
	require.Equal(t, false, same["fresh"])
	require.Equal(t, false, same["reset"])
	rows, _ := b.state(t, shard(qid, pA))
	require.Len(t, rows, 1, "an equal hash keeps the state even with reset:true")
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.streams_queries WHERE source_queue = 'clicks2'`))

	// Changed hash without reset: 409, nothing changes.
	status, m := b.spost(t, "/streams/v1/queries", map[string]any{"name": "clicks.per_user", "source_queue": "clicks3",
		"config_hash": "h2", "reset": false})
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, false, m["success"])
	require.Equal(t, qid, m["query_id"])
	require.Equal(t, "clicks.per_user", m["name"])
	require.Regexp(t, `^config_hash mismatch`, m["error"])
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.streams_queries WHERE config_hash = 'h1' AND source_queue = 'clicks2'`))
	require.Equal(t, int64(2), d.int(t, `SELECT count(*) FROM queen.streams_state`))

	// Changed hash with reset: every partition's state goes, the id stays.
	reset := b.register(t, "clicks.per_user", "clicks", "h2", true)
	require.Equal(t, qid, reset["query_id"])
	require.Equal(t, false, reset["fresh"])
	require.Equal(t, true, reset["reset"])
	require.Equal(t, "h2", reset["config_hash"])
	for _, p := range []string{pA, pB} {
		rows, _ := b.state(t, shard(qid, p))
		require.Empty(t, rows)
	}
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.streams_queries WHERE config_hash = 'h2' AND sink_queue = 'clicks.out'`))

	// A sink_queue left out is stored as NULL.
	status, _ = b.spost(t, "/streams/v1/queries", map[string]any{"name": "clicks.per_user", "source_queue": "clicks",
		"config_hash": "h2"})
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.streams_queries WHERE sink_queue IS NULL`))

	// Concurrent first registrations of one name: exactly one fresh, one id;
	// those with another hash than the winner's get 409.
	const n = 8
	var wg sync.WaitGroup
	type answer struct {
		status int
		m      map[string]any
	}
	answers := make([]answer, n)
	for i := range n {
		wg.Go(func() {
			s, out := do(t, "POST", b.URL+"/streams/v1/queries", map[string]any{"name": "race", "source_queue": "s",
				"config_hash": fmt.Sprintf("h%d", i%2), "reset": false})
			answers[i].status = s
			_ = json.Unmarshal(out, &answers[i].m)
		})
	}
	wg.Wait()
	fresh := 0
	ids := map[any]bool{}
	var winner string
	require.NoError(t, d.pool.QueryRow(t.Context(), d.q(`SELECT config_hash FROM queen.streams_queries WHERE name = 'race'`)).Scan(&winner))
	for i, a := range answers {
		ids[a.m["query_id"]] = true
		if fmt.Sprintf("h%d", i%2) == winner {
			require.Equal(t, http.StatusOK, a.status, "%v", a.m)
			if a.m["fresh"] == true {
				fresh++
			}
		} else {
			require.Equal(t, http.StatusConflict, a.status, "%v", a.m)
		}
	}
	require.Equal(t, 1, fresh)
	require.Len(t, ids, 1)
}

// runnerPop pops the source for a query's group and requires messages.
func runnerPop(t *testing.T, b *testBroker, queue, group string, batch int) popResponse {
	t.Helper()
	r := b.pop(t, queue, "", url.Values{"batch": {strconv.Itoa(batch)}, "consumerGroup": {group}})
	require.Equal(t, group, r.ConsumerGroup)
	for _, m := range r.Messages {
		require.Equal(t, group, m.ConsumerGroup, "every message carries the requested group")
		require.Equal(t, r.LeaseID, m.LeaseID)
	}
	return r
}

func TestStreamsCycleStateSinkAndAck(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	pushN(t, b, "clicks", "user-1", 0, 3)
	qid := b.register(t, "sum", "clicks", "h", false)["query_id"].(string)
	group := "streams.sum"

	r := runnerPop(t, b, "clicks", group, 10)
	require.Len(t, r.Messages, 3)
	rows, _ := b.state(t, map[string]any{"query_id": qid, "partition_id": r.PartitionID, "keys": []string{}})
	require.Empty(t, rows)
	last := r.Messages[2]

	// A cycle that fails (a lease that is not the live one) applies nothing.
	bad := map[string]any{"query_id": qid, "partition_id": r.PartitionID, "consumer_group": group,
		"state_ops":  []map[string]any{{"type": "upsert", "key": "sum", "value": map[string]any{"n": 3}}},
		"push_items": []item{{"queue": "clicks.out", "partition": "user-1", "payload": map[string]any{"sum": 3}}},
		"ack": map[string]any{"transactionId": last.TransactionID, "leaseId": "0193f0c2-0000-7000-8000-000000000000",
			"status": "completed", "count": 3},
		"release_lease": true}
	m := b.cycle(t, bad)
	require.Equal(t, false, m["success"])
	require.Equal(t, "Invalid or expired lease", m["error"])
	rows, _ = b.state(t, shard(qid, r.PartitionID))
	require.Empty(t, rows, "no state from a failed cycle")
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.queues WHERE name = 'clicks.out'`),
		"no sink queue, no sink message from a failed cycle")
	require.Equal(t, int64(0), d.int(t, `SELECT cursor_offset FROM queen.consumers WHERE consumer_group = $1`, group))

	// The real cycle: ops in order, two sink items, the ack.
	good := map[string]any{"query_id": qid, "partition_id": r.PartitionID, "consumer_group": group,
		"state_ops": []map[string]any{
			{"type": "upsert", "key": "gone", "value": 1},
			{"type": "delete", "key": "gone"},
			{"type": "delete", "key": "never-there"},
			{"type": "upsert", "key": "sum", "value": map[string]any{"n": 1}},
			{"type": "upsert", "key": "sum", "value": map[string]any{"n": 3}},
			{"type": "delete", "key": "back"},
			{"type": "upsert", "key": "back"},
			{"type": "upsert", "key": "null", "value": nil},
			{"type": "delete"},
		},
		"push_items": []item{
			{"queue": "clicks.out", "partition": "user-1", "payload": map[string]any{"sum": 3}},
			{"queue": "clicks.out", "partition": "user-1", "payload": map[string]any{"sum": 4}, "producerSub": "forged"},
			{"queue": "clicks.audit"},
		},
		"ack":           map[string]any{"transactionId": last.TransactionID, "leaseId": last.LeaseID, "status": "completed", "count": 3},
		"release_lease": true}
	m = b.cycle(t, good)
	require.Equal(t, true, m["success"], "%v", m)
	require.Equal(t, qid, m["query_id"])
	require.Equal(t, r.PartitionID, m["partition_id"])
	require.Equal(t, "clicks", m["queueName"])
	require.InDelta(t, 9, m["state_ops_applied"], 0)
	require.Equal(t, map[string]any{"success": true, "count": 3.0, "lease_released": true, "dlq": false}, m["ack_result"])
	prs := m["push_results"].([]any)
	require.Len(t, prs, 3)
	for i, p := range prs {
		pr := p.(map[string]any)
		require.InDelta(t, i, pr["index"], 0)
		require.Equal(t, "queued", pr["status"])
		require.NotEmpty(t, pr["message_id"])
		require.NotEmpty(t, pr["transaction_id"])
		require.NotEmpty(t, pr["partition_id"])
		require.Contains(t, pr, "trace_id")
	}
	require.Equal(t, "clicks.audit", prs[2].(map[string]any)["queueName"])

	rows, keys := b.state(t, map[string]any{"query_id": qid, "partition_id": r.PartitionID, "keys": nil})
	require.Equal(t, []string{"back", "null", "sum"}, keys)
	require.JSONEq(t, `{"n":3}`, string(rows["sum"]))
	require.JSONEq(t, `{}`, string(rows["back"]), "an upsert without value stores {}")
	require.JSONEq(t, `null`, string(rows["null"]))

	// The sink messages, in push order, with the source partition's name;
	// producerSub is the token's (none: auth off), never the body's.
	s := b.pop(t, "clicks.out", "user-1", url.Values{"batch": {"10"}})
	require.Len(t, s.Messages, 2)
	require.JSONEq(t, `{"sum":3}`, string(s.Messages[0].Data))
	require.JSONEq(t, `{"sum":4}`, string(s.Messages[1].Data))
	require.Equal(t, map[string]string{prs[0].(map[string]any)["transaction_id"].(string): "",
		prs[1].(map[string]any)["transaction_id"].(string): ""}, d.storedSubs(t, "clicks.out"))
	a := b.pop(t, "clicks.audit", "Default", nil)
	require.JSONEq(t, `{}`, string(a.Messages[0].Data), "a push item without payload carries {}")

	// The cursor is past the batch and the lease released: the next pop of
	// the group gets only new messages.
	require.Equal(t, int64(3), d.int(t, `SELECT cursor_offset FROM queen.consumers WHERE consumer_group = $1`, group))
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.consumers WHERE consumer_group = $1 AND lease_id IS NOT NULL`, group))
	pushN(t, b, "clicks", "user-1", 3, 1)
	r2 := runnerPop(t, b, "clicks", group, 10)
	require.Len(t, r2.Messages, 1)
	require.Equal(t, "clicks-user-1-3", r2.Messages[0].TransactionID)

	// The same cycle again (an HTTP retry after a lost answer): the lease it
	// names is gone, so nothing is applied twice.
	m = b.cycle(t, good)
	require.Equal(t, false, m["success"])
	require.Equal(t, "Invalid or expired lease", m["error"])
	_, frames, _, _, _ := d.partitionStats(t, "clicks.out", "user-1")
	require.Equal(t, int64(2), frames)
}

func TestStreamsEmptyCycles(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	pushN(t, b, "src", "p", 0, 2)
	qid := b.register(t, "filter-all", "src", "h", false)["query_id"].(string)
	group := "streams.filter-all"

	// Nothing at all: success, no change.
	m := b.cycle(t, map[string]any{"query_id": qid, "partition_id": "0193f0c2-5a7e-7c11-8d40-2b9e61a0c3f5",
		"state_ops": nil, "push_items": nil, "ack": nil})
	require.Equal(t, true, m["success"], "%v", m)
	require.InDelta(t, 0, m["state_ops_applied"], 0)
	require.Equal(t, []any{}, m["push_results"])
	require.Nil(t, m["ack_result"])
	require.Nil(t, m["queueName"], "an unknown partition has no queue")

	// Every record filtered out: only the ack, which moves the cursor and
	// frees the partition.
	r := runnerPop(t, b, "src", group, 10)
	m = b.cycle(t, map[string]any{"query_id": qid, "partition_id": r.PartitionID, "consumer_group": group,
		"state_ops": []any{}, "push_items": []any{},
		"ack": map[string]any{"transactionId": r.Messages[1].TransactionID, "leaseId": r.LeaseID, "count": 2}})
	require.Equal(t, true, m["success"], "%v", m)
	require.Equal(t, int64(2), d.int(t, `SELECT cursor_offset FROM queen.consumers WHERE consumer_group = $1`, group))
	status, _ := do(t, "GET", b.URL+"/api/v1/pop/queue/src?consumerGroup="+group, nil)
	require.Equal(t, http.StatusNoContent, status)
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.streams_state`))
}

func TestStreamsLeaseExpiryAndTakeover(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	pushN(t, b, "src", "p", 0, 3)
	qid := b.register(t, "q", "src", "h", false)["query_id"].(string)
	group := "streams.q"
	cycleFor := func(r popResponse, n int) map[string]any {
		return map[string]any{"query_id": qid, "partition_id": r.PartitionID, "consumer_group": group,
			"state_ops":  []map[string]any{{"type": "upsert", "key": "count", "value": n}},
			"push_items": []item{{"queue": "out", "payload": map[string]any{"count": n}}},
			"ack":        map[string]any{"transactionId": r.Messages[len(r.Messages)-1].TransactionID, "leaseId": r.LeaseID}}
	}

	// Runner A takes the partition; runner B finds nothing while A's lease
	// lives.
	a := runnerPop(t, b, "src", group, 10)
	status, _ := do(t, "GET", b.URL+"/api/v1/pop/queue/src?consumerGroup="+group, nil)
	require.Equal(t, http.StatusNoContent, status)

	// A stalls past its lease; B takes over the same messages.
	d.exec(t, `UPDATE queen.consumers SET lease_expires_at = now() - interval '1 second', avail_at = now() - interval '1 second' WHERE consumer_group = $1`, group)
	bp := runnerPop(t, b, "src", group, 10)
	require.Len(t, bp.Messages, 3)
	require.Equal(t, a.Messages[0].TransactionID, bp.Messages[0].TransactionID)
	require.NotEqual(t, a.LeaseID, bp.LeaseID)
	require.Equal(t, int64(0), d.int(t, `SELECT retry_count FROM queen.consumers WHERE consumer_group = $1`, group),
		"expiry is not a failure")

	// A's late cycle is refused and applies nothing; B's commits.
	m := b.cycle(t, cycleFor(a, 100))
	require.Equal(t, false, m["success"])
	require.Equal(t, "Invalid or expired lease", m["error"])
	m = b.cycle(t, cycleFor(bp, 3))
	require.Equal(t, true, m["success"], "%v", m)
	rows, _ := b.state(t, shard(qid, bp.PartitionID))
	require.JSONEq(t, `3`, string(rows["count"]))
	out := b.pop(t, "out", "", url.Values{"batch": {"10"}})
	require.Len(t, out.Messages, 1)
	require.JSONEq(t, `{"count":3}`, string(out.Messages[0].Data))

	// A lease that expired with no one else around fails too (12.3).
	pushN(t, b, "src", "p", 3, 1)
	c := runnerPop(t, b, "src", group, 10)
	d.exec(t, `UPDATE queen.consumers SET lease_expires_at = now() - interval '1 second', avail_at = now() - interval '1 second' WHERE consumer_group = $1`, group)
	m = b.cycle(t, cycleFor(c, 4))
	require.Equal(t, false, m["success"])
	require.Equal(t, "Invalid or expired lease", m["error"])
}

// TestStreamsRetriedCyclesAreDeduplicated: a cycle whose lease stays (a
// gate's release_lease:false) or that has no ack (an idle flush) would
// apply again when the HTTP client retries it after a lost answer; its sink
// pushes are deduplicated (the same bytes mint the same transaction ids).
func TestStreamsRetriedCyclesAreDeduplicated(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	pushN(t, b, "api", "tenant-3", 0, 3)
	qid := b.register(t, "throttle", "api", "h", false)["query_id"].(string)
	group := "streams.throttle"
	r := runnerPop(t, b, "api", group, 10)

	gate := map[string]any{"query_id": qid, "partition_id": r.PartitionID, "consumer_group": group,
		"state_ops": []map[string]any{{"type": "upsert", "key": r.PartitionID, "value": map[string]any{"tokens": 0}}},
		"push_items": []item{{"queue": "api.approved", "partition": "tenant-3", "payload": map[string]any{"seq": 0}},
			{"queue": "api.approved", "partition": "tenant-3", "payload": map[string]any{"seq": 1}}},
		"ack":           map[string]any{"transactionId": r.Messages[1].TransactionID, "leaseId": r.LeaseID, "count": 2},
		"release_lease": false}
	first := b.cycle(t, gate)
	require.Equal(t, true, first["success"], "%v", first)
	require.Equal(t, false, first["ack_result"].(map[string]any)["lease_released"])
	again := b.cycle(t, gate)
	require.Equal(t, true, again["success"], "%v", again)
	for i := range 2 {
		p1 := first["push_results"].([]any)[i].(map[string]any)
		p2 := again["push_results"].([]any)[i].(map[string]any)
		require.Equal(t, "duplicate", p2["status"])
		require.Equal(t, p1["message_id"], p2["message_id"])
		require.Equal(t, p1["transaction_id"], p2["transaction_id"])
		require.NotContains(t, p2, "partition_id")
	}
	_, frames, _, _, _ := d.partitionStats(t, "api.approved", "tenant-3")
	require.Equal(t, int64(2), frames)
	// The lease is kept: the group cannot claim the partition until expiry,
	// then gets the message after the acked one.
	status, _ := do(t, "GET", b.URL+"/api/v1/pop/queue/api?consumerGroup="+group, nil)
	require.Equal(t, http.StatusNoContent, status)
	d.exec(t, `UPDATE queen.consumers SET lease_expires_at = now() - interval '1 second', avail_at = now() - interval '1 second' WHERE consumer_group = $1`, group)
	r2 := runnerPop(t, b, "api", group, 10)
	require.Equal(t, "api-tenant-3-2", r2.Messages[0].TransactionID)

	// A flush cycle (no ack) retried: its deletes are no-ops, its pushes
	// duplicates.
	flush := map[string]any{"query_id": qid, "partition_id": r.PartitionID, "consumer_group": group,
		"state_ops":  []map[string]any{{"type": "delete", "key": r.PartitionID}},
		"push_items": []item{{"queue": "api.approved", "partition": "tenant-3", "payload": map[string]any{"window": 1}}},
		"ack":        nil}
	require.Equal(t, "queued", b.cycle(t, flush)["push_results"].([]any)[0].(map[string]any)["status"])
	require.Equal(t, "duplicate", b.cycle(t, flush)["push_results"].([]any)[0].(map[string]any)["status"])
	_, frames, _, _, _ = d.partitionStats(t, "api.approved", "tenant-3")
	require.Equal(t, int64(3), frames)
	rows, _ := b.state(t, shard(qid, r.PartitionID))
	require.Empty(t, rows)

	// An item with its own transactionId is deduplicated as any push.
	own := map[string]any{"query_id": qid, "partition_id": r.PartitionID,
		"push_items": []item{{"queue": "api.approved", "partition": "tenant-3", "transactionId": "t-1"},
			{"queue": "api.approved", "partition": "tenant-3", "transactionId": "t-1"}}}
	m := b.cycle(t, own)
	require.Equal(t, true, m["success"], "%v", m)
	prs := m["push_results"].([]any)
	require.Equal(t, "queued", prs[0].(map[string]any)["status"])
	require.Equal(t, "duplicate", prs[1].(map[string]any)["status"])
}

func TestStreamsStateGetFilters(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	qid := b.register(t, "win", "src", "h", false)["query_id"].(string)
	pid := "0193f0c2-5a7e-7c11-8d40-2b9e61a0c3f5"
	us := "\u001f"
	ops := []map[string]any{
		{"type": "upsert", "key": "tumb:300" + us + "a", "value": map[string]any{"acc": 1, "windowEnd": 1000}},
		{"type": "upsert", "key": "tumb:300" + us + "b", "value": map[string]any{"acc": 2, "windowEnd": 2000.5}},
		{"type": "upsert", "key": "tumb:300" + us + "c", "value": map[string]any{"acc": 3, "windowEnd": "1"}},
		{"type": "upsert", "key": "tumb:30%", "value": map[string]any{"windowEnd": 1}},
		{"type": "upsert", "key": "__wm__", "value": map[string]any{"eventTimeMs": 5}},
		{"type": "upsert", "key": "Zeta", "value": []int{1}},
	}
	m := b.cycle(t, map[string]any{"query_id": qid, "partition_id": pid, "state_ops": ops})
	require.Equal(t, true, m["success"], "%v", m)

	_, keys := b.state(t, shard(qid, pid))
	require.Equal(t, []string{"Zeta", "__wm__", "tumb:30%", "tumb:300" + us + "a", "tumb:300" + us + "b",
		"tumb:300" + us + "c"}, keys, "byte order; U+001F round-trips")

	f := shard(qid, pid)
	f["key_prefix"] = "tumb:300" + us
	_, keys = b.state(t, f)
	require.Len(t, keys, 3)
	f["key_prefix"] = "tumb:30%" // literal, not a LIKE pattern
	_, keys = b.state(t, f)
	require.Equal(t, []string{"tumb:30%"}, keys)
	f["key_prefix"] = "tumb:3_0"
	_, keys = b.state(t, f)
	require.Empty(t, keys)

	f = shard(qid, pid)
	f["key_prefix"] = "tumb:300" + us
	f["ripe_at_or_before"] = 2000.25
	_, keys = b.state(t, f)
	require.Equal(t, []string{"tumb:300" + us + "a"}, keys, "numeric windowEnd <= value; a string windowEnd never")
	f["ripe_at_or_before"] = 2000.5
	_, keys = b.state(t, f)
	require.Len(t, keys, 2)
	f["ripe_at_or_before"] = "2000" // not a number: no filter
	_, keys = b.state(t, f)
	require.Len(t, keys, 3)

	f = shard(qid, pid)
	f["keys"] = []string{"Zeta", "missing", "__wm__"}
	rows, keys := b.state(t, f)
	require.Equal(t, []string{"Zeta", "__wm__"}, keys)
	require.JSONEq(t, `[1]`, string(rows["Zeta"]))

	// Unknown ids are not errors.
	_, keys = b.state(t, shard("0193f0c2-5a7e-7c11-8d40-000000000000", pid))
	require.Empty(t, keys)
}

func TestStreamsBadInput(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	pushN(t, b, "src", "p", 0, 1)
	qid := b.register(t, "q", "src", "h", false)["query_id"].(string)
	pid := "0193f0c2-5a7e-7c11-8d40-2b9e61a0c3f5"
	before := d.fingerprint(t)

	for _, c := range []struct {
		path, body, want string
	}{
		{"/streams/v1/queries", ``, "Empty request body"},
		{"/streams/v1/queries", `{"name":`, "Invalid JSON: "},
		{"/streams/v1/queries", `[1]`, "request body must be a JSON object"},
		{"/streams/v1/queries", `{"source_queue":"s","config_hash":"h"}`, "name is required"},
		{"/streams/v1/queries", `{"name":"","source_queue":"s","config_hash":"h"}`, "name is required"},
		{"/streams/v1/queries", `{"name":"n","config_hash":"h"}`, "source_queue is required"},
		{"/streams/v1/queries", `{"name":"n","source_queue":"s","config_hash":7}`, "config_hash is required"},
		{"/streams/v1/queries", `{"name":"n","source_queue":"s","config_hash":"h","reset":"yes"}`, "reset must be a boolean"},
		{"/streams/v1/queries", `{"name":"n\u0000","source_queue":"s","config_hash":"h"}`, "name must not contain NUL characters"},
		{"/streams/v1/state/get", `{}`, "query_id is required"},
		{"/streams/v1/state/get", `{"query_id":"` + qid + `"}`, "partition_id is required"},
		{"/streams/v1/state/get", `{"query_id":"nope","partition_id":"` + pid + `"}`, "query_id must be a UUID"},
		{"/streams/v1/state/get", `{"query_id":"` + qid + `","partition_id":"x"}`, "partition_id must be a UUID"},
		{"/streams/v1/cycle", ` `, "Empty request body"},
		{"/streams/v1/cycle", `"x"`, "request body must be a JSON object"},
		{"/streams/v1/cycle", `{"partition_id":"` + pid + `"}`, "query_id is required"},
		{"/streams/v1/cycle", `{"query_id":"` + qid + `","partition_id":5}`, "partition_id is required"},
	} {
		status, out := do(t, "POST", b.URL+c.path, c.body)
		require.Equal(t, http.StatusBadRequest, status, "%s %s: %s", c.path, c.body, out)
		var m map[string]any
		require.NoError(t, json.Unmarshal(out, &m))
		require.Contains(t, m["error"], c.want, "%s %s", c.path, c.body)
	}
	require.Equal(t, before, d.fingerprint(t), "a 400 changes nothing")

	// Cycles that fail inside: 200, success:false, the reason; nothing
	// applied (each carries an upsert and a push that must not land).
	r := runnerPop(t, b, "src", "streams.q", 10)
	ack := map[string]any{"transactionId": r.Messages[0].TransactionID, "leaseId": r.LeaseID}
	for _, c := range []struct {
		patch map[string]any
		want  string
	}{
		{map[string]any{"query_id": "not-a-uuid"}, "query_id must be a UUID"},
		{map[string]any{"partition_id": "not-a-uuid"}, "partition_id must be a UUID"},
		{map[string]any{"query_id": "0193f0c2-0000-7000-8000-000000000000"}, "unknown query_id"},
		{map[string]any{"state_ops": []map[string]any{{"type": "merge", "key": "k"}}}, "Unknown state_op type: merge"},
		{map[string]any{"state_ops": []map[string]any{{"type": "upsert", "value": 1}}}, "an upsert needs a string key"},
		{map[string]any{"state_ops": []map[string]any{{"type": "upsert", "key": "k\u0000"}}},
			"state_ops[0].key must not contain NUL"},
		{map[string]any{"state_ops": []map[string]any{{"type": "upsert", "key": "k", "value": "\u0000"}}},
			"state_ops[0].value must not contain NUL"},
		{map[string]any{"state_ops": "all"}, "state_ops must be an array"},
		{map[string]any{"push_items": []item{{"payload": 1}}}, "push_items[0]: queue must be a string"},
		{map[string]any{"push_items": []item{{"queue": "o", "traceId": "t"}}}, "push_items[0]: traceId must be a UUID"},
		{map[string]any{"ack": map[string]any{"leaseId": r.LeaseID}}, "ack.transactionId is required"},
		{map[string]any{"ack": map[string]any{"transactionId": r.Messages[0].TransactionID, "status": "maybe"}}, "Unknown ack.status: maybe"},
		{map[string]any{"ack": map[string]any{"transactionId": "no-such-message", "leaseId": r.LeaseID}}, "Message not found"},
		{map[string]any{"ack": map[string]any{"transactionId": r.Messages[0].TransactionID, "leaseId": "junk"}}, "Invalid or expired lease"},
		{map[string]any{"ack": 5}, "ack must be an object or null"},
		{map[string]any{"release_lease": "no"}, "release_lease must be a boolean"},
		{map[string]any{"consumer_group": 1}, "consumer_group must be a string"},
		{map[string]any{"consumer_group": "other"}, "Invalid or expired lease"},
	} {
		body := map[string]any{"query_id": qid, "partition_id": r.PartitionID, "consumer_group": "streams.q",
			"state_ops":  []map[string]any{{"type": "upsert", "key": "k", "value": 1}},
			"push_items": []item{{"queue": "sink", "payload": 1}}, "ack": ack}
		maps.Copy(body, c.patch)
		m := b.cycle(t, body)
		require.Equal(t, false, m["success"], "%v", c.patch)
		require.Contains(t, m["error"], c.want, "%v", c.patch)
		require.Equal(t, []any{}, m["push_results"])
		require.Nil(t, m["ack_result"])
	}
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.streams_state`))
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.queues WHERE name = 'sink'`))
	require.Equal(t, int64(0), d.int(t, `SELECT cursor_offset FROM queen.consumers WHERE consumer_group = 'streams.q'`))
}

// TestStreamsAuth: with auth on, registering and cycling need read-write,
// reading state read-only suffices, and sink messages carry the token's sub
// (never the item's producerSub).
func TestStreamsAuth(t *testing.T) {
	t.Parallel()
	b := startAuthBroker(t, nil)
	d := newDB(t, b.Schema)
	rw := "Bearer " + hsToken(t, "stream-runner", "read-write")
	ro := "Bearer " + hsToken(t, "viewer", "read-only")
	reg := map[string]any{"name": "q", "source_queue": "src", "config_hash": "h"}
	status, out, _ := doAuth(t, "POST", b.URL+"/streams/v1/queries", ro, reg)
	require.Equal(t, http.StatusForbidden, status, "%s", out)
	status, out, _ = doAuth(t, "POST", b.URL+"/streams/v1/queries", rw, reg)
	require.Equal(t, http.StatusOK, status, "%s", out)
	var r map[string]any
	require.NoError(t, json.Unmarshal(out, &r))
	pid := "0193f0c2-5a7e-7c11-8d40-2b9e61a0c3f5"
	cycle := map[string]any{"query_id": r["query_id"], "partition_id": pid,
		"state_ops":  []map[string]any{{"type": "upsert", "key": "k", "value": 1}},
		"push_items": []item{{"queue": "sink", "transactionId": "s1", "producerSub": "forged"}}}
	status, out, _ = doAuth(t, "POST", b.URL+"/streams/v1/cycle", ro, cycle)
	require.Equal(t, http.StatusForbidden, status, "%s", out)
	status, out, _ = doAuth(t, "POST", b.URL+"/streams/v1/cycle", rw, cycle)
	require.Equal(t, http.StatusOK, status, "%s", out)
	require.Contains(t, string(out), `"success":true`)
	require.Equal(t, map[string]string{"s1": "stream-runner"}, d.storedSubs(t, "sink"))
	status, out, _ = doAuth(t, "POST", b.URL+"/streams/v1/state/get", ro, shard(r["query_id"].(string), pid))
	require.Equal(t, http.StatusOK, status, "%s", out)
	require.Contains(t, string(out), `"key":"k"`)
}

// TestStreamsDLQAck: a cycle ack with status failed dead-letters the acked
// message (no retry counting), moves the cursor past it and releases the
// lease.
func TestStreamsDLQAck(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	pushN(t, b, "src", "p", 0, 2)
	qid := b.register(t, "q", "src", "h", false)["query_id"].(string)
	r := runnerPop(t, b, "src", "streams.q", 1)
	m := b.cycle(t, map[string]any{"query_id": qid, "partition_id": r.PartitionID, "consumer_group": "streams.q",
		"ack": map[string]any{"transactionId": r.Messages[0].TransactionID, "leaseId": r.LeaseID, "status": "failed",
			"error": "poison"}})
	require.Equal(t, true, m["success"], "%v", m)
	require.Equal(t, map[string]any{"success": true, "count": 0.0, "lease_released": true, "dlq": true}, m["ack_result"])
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.dlq WHERE consumer_group = 'streams.q'
		AND transaction_id = 'src-p-0' AND error_message = 'poison' AND retry_count = 0`))
	next := runnerPop(t, b, "src", "streams.q", 10)
	require.Equal(t, "src-p-1", next.Messages[0].TransactionID)
}
