package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

type txnResponse struct {
	TransactionID string `json:"transactionId"`
	Success       bool   `json:"success"`
	Error         string `json:"error"`
	Queue         string `json:"queue"`
	Partition     string `json:"partition"`
	Results       []struct {
		Index         int    `json:"index"`
		Type          string `json:"type"`
		Success       bool   `json:"success"`
		TransactionID string `json:"transactionId"`
		MessageID     string `json:"messageId"`
		PartitionID   string `json:"partitionId"`
		QueueName     string `json:"queueName"`
		Status        string `json:"status"`
	} `json:"results"`
}

func (b *testBroker) txn(t *testing.T, body any) (int, txnResponse) {
	t.Helper()
	code, raw := do(t, "POST", b.URL+"/api/v1/transaction", body)
	var r txnResponse
	require.NoError(t, json.Unmarshal(raw, &r), "%s", raw)
	return code, r
}

func ackOp(m popMessage) map[string]any {
	return map[string]any{"type": "ack", "transactionId": m.TransactionID, "partitionId": m.PartitionID, "status": "completed"}
}

func TestTransactionConsumeTransformProduce(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	pushN(t, b, "in", "Default", 0, 1)
	r := b.pop(t, "in", "", nil)
	code, res := b.txn(t, map[string]any{
		"operations": []any{
			ackOp(r.Messages[0]),
			map[string]any{"type": "push", "items": []item{
				{"queue": "out", "partition": "p", "transactionId": "derived:0", "payload": map[string]any{"ok": true}}}},
		},
		"requiredLeases": []string{r.LeaseID},
	})
	require.Equal(t, http.StatusOK, code, "%+v", res)
	require.True(t, res.Success)
	require.Len(t, res.Results, 2)
	require.Equal(t, "ack", res.Results[0].Type)
	require.True(t, res.Results[0].Success)
	require.Equal(t, "push", res.Results[1].Type)
	require.Equal(t, "out", res.Results[1].QueueName)
	require.Len(t, res.Results[1].MessageID, 36)

	require.Empty(t, b.pop(t, "in", "", nil).Messages, "the ack committed")
	out := b.pop(t, "out", "p", nil)
	require.Equal(t, "derived:0", out.Messages[0].TransactionID)
	require.Equal(t, res.Results[1].MessageID, out.Messages[0].ID)
	// The transaction's write is deduplicated like any other.
	dup := b.push(t, item{"queue": "out", "partition": "p", "transactionId": "derived:0"})
	require.Equal(t, "duplicate", dup[0].Status)
	require.Equal(t, res.Results[1].MessageID, dup[0].MessageID)
}

func TestTransactionDuplicateRollsBackEverything(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	orig := b.push(t, item{"queue": "out", "partition": "p", "transactionId": "derived:1"})
	pushN(t, b, "in", "Default", 0, 1)
	r := b.pop(t, "in", "", nil)
	code, res := b.txn(t, map[string]any{"operations": []any{
		ackOp(r.Messages[0]),
		map[string]any{"type": "push", "items": []item{
			{"queue": "out", "partition": "fresh", "transactionId": "new-one"},
			{"queue": "out", "partition": "p", "transactionId": "derived:1"}}},
	}})
	require.Equal(t, http.StatusConflict, code)
	require.False(t, res.Success)
	require.Contains(t, res.Error, `duplicate transactionId "derived:1"`)
	require.Contains(t, res.Error, `queue "out" partition "p"`)
	require.Contains(t, res.Error, orig[0].MessageID)
	require.NotContains(t, res.Error, "SQLSTATE")
	require.Equal(t, "out", res.Queue)
	require.Equal(t, "p", res.Partition)

	// Nothing of it happened: the ack, the other push, the allocator.
	_, frames, _, _, next := d.partitionStats(t, "out", "p")
	require.Equal(t, []int64{1, 1}, []int64{frames, next})
	_, freshFrames, _, _, _ := d.partitionStats(t, "out", "fresh")
	require.Equal(t, int64(0), freshFrames)
	d.exec(t, `UPDATE queen.consumers SET lease_expires_at = now() - interval '1 second', avail_at = now() - interval '1 second'`)
	again := b.pop(t, "in", "", nil)
	require.Equal(t, r.Messages[0].ID, again.Messages[0].ID, "the ack was rolled back: redelivered")
}

func TestTransactionBadInputAndDeadLeases(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	cases := map[string]string{
		`{}`:                                   "operations array required",
		`{"operations":[]}`:                    "operations array cannot be empty",
		`{"operations":[{"type":"teleport"}]}`: "Unknown operation type: teleport",
		`{"operations":[{"items":[]}]}`:        "type is required",
		`{"operations":[{"type":"push"}]}`:     "items array is required",
		`{"operations":[{"type":"push","items":[{"payload":1}]}]}`:                             "queue must be a string",
		`{"operations":[{"type":"ack","partitionId":"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}]}`: "transactionId is required",
		`{"operations":[{"type":"ack","transactionId":"x"}]}`:                                  "partitionId is required",
		`{"operations":[{"type":"push","items":[{"queue":"q"}]}],"requiredLeases":["nope"]}`:   "not a lease id",
	}
	for body, want := range cases {
		code, raw := do(t, "POST", b.URL+"/api/v1/transaction", body)
		require.Equal(t, http.StatusBadRequest, code, "%s -> %s", body, raw)
		require.Contains(t, string(raw), want, body)
	}
	code, res := b.txn(t, map[string]any{
		"operations":     []any{map[string]any{"type": "push", "items": []item{{"queue": "q", "transactionId": "x"}}}},
		"requiredLeases": []string{"0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"},
	})
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, res.Error, "lease is not live")
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.segments`), "nothing was written")
}

func TestConcurrentTransactionsOnOverlappingPartitions(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	parts := []string{"a", "b", "c", "d"}
	const workers, rounds = 6, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range rounds {
				order := rng.Perm(len(parts))
				var items []item
				for _, k := range order {
					items = append(items, item{"queue": "mesh", "partition": parts[k], "transactionId": fmt.Sprintf("w%d-r%d-%s", w, i, parts[k])})
				}
				code, raw := do(t, "POST", b.URL+"/api/v1/transaction", map[string]any{"operations": []any{
					map[string]any{"type": "push", "items": items[:2]}, map[string]any{"type": "push", "items": items[2:]}}})
				if code != http.StatusOK {
					t.Errorf("worker %d round %d: %d %s", w, i, code, raw)
				}
			}
		})
	}
	wg.Wait()
	for _, p := range parts {
		_, frames, _, _, next := d.partitionStats(t, "mesh", p)
		require.Equal(t, []int64{workers * rounds, workers * rounds}, []int64{frames, next}, p)
	}
}

func TestTransactionRacingPlainPushStoresOnce(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	const rounds = 25
	for i := range rounds {
		id := fmt.Sprintf("race-%d", i)
		var wg sync.WaitGroup
		var txCode int
		var pushStatus string
		wg.Add(2)
		go func() {
			defer wg.Done()
			txCode, _ = do(t, "POST", b.URL+"/api/v1/transaction", map[string]any{"operations": []any{
				map[string]any{"type": "push", "items": []item{{"queue": "race", "partition": "p", "transactionId": id}}}}})
		}()
		go func() {
			defer wg.Done()
			status, raw := b.pushRaw(t, map[string]any{"items": []item{{"queue": "race", "partition": "p", "transactionId": id}}})
			if status == http.StatusCreated {
				var rs []pushResult
				_ = json.Unmarshal(raw, &rs)
				pushStatus = rs[0].Status
			}
		}()
		wg.Wait()
		// Exactly one of them stored it: the transaction (200) and the push
		// answered duplicate, or the push queued it and the transaction was
		// rolled back as a duplicate (409).
		require.True(t, (txCode == http.StatusOK && pushStatus == "duplicate") ||
			(txCode == http.StatusConflict && pushStatus == "queued"), "round %d: txn %d, push %q", i, txCode, pushStatus)
	}
	_, frames, _, _, next := d.partitionStats(t, "race", "p")
	require.Equal(t, []int64{rounds, rounds}, []int64{frames, next})
}
