package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// The dedupPayloadCheck option (issue 18): a repeat of a transaction id is
// compared with its original's payload fingerprint.

// checkedResult is one push answer with the fields of the payload check.
type checkedResult struct {
	MessageID       string `json:"message_id"`
	Status          string `json:"status"`
	PayloadMismatch *bool  `json:"payloadMismatch"`
	Error           string `json:"error"`
}

// pushBody posts a raw push body (payload bytes exactly as written) and
// returns the raw answer and its decoded items.
func (b *testBroker) pushBody(t *testing.T, body string) ([]byte, []checkedResult) {
	t.Helper()
	status, raw := b.pushRaw(t, body)
	require.Equal(t, http.StatusCreated, status, "push answered %s", raw)
	var res []checkedResult
	require.NoError(t, json.Unmarshal(raw, &res), "%s", raw)
	return raw, res
}

// one is a push body of items (queue, partition, transactionId, raw payload).
func one(queue, part string, txPayloads ...string) string {
	s := `{"items":[`
	for i := 0; i+1 < len(txPayloads); i += 2 {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf(`{"queue":%q,"partition":%q,"transactionId":%q,"payload":%s}`, queue, part, txPayloads[i], txPayloads[i+1])
	}
	return s + `]}`
}

func mismatch(t *testing.T, want *bool, r checkedResult) {
	t.Helper()
	if want == nil {
		require.Nil(t, r.PayloadMismatch, "%+v", r)
		return
	}
	require.NotNil(t, r.PayloadMismatch, "%+v", r)
	require.Equal(t, *want, *r.PayloadMismatch, "%+v", r)
}

var (
	yes     = new(true)
	no      = new(false)
	unknown *bool
)

func mismatchCounter(t *testing.T, b *testBroker, queue string) float64 {
	t.Helper()
	return scrapeProm(t, b).value("regina_dedup_payload_mismatch_total", map[string]string{"queue": queue})
}

// ageQueue moves every stored row of queue back by secs seconds.
func ageQueue(t *testing.T, d *db, queue string, secs int) {
	t.Helper()
	for _, table := range []string{"queen.log_txns", "queen.segments"} {
		d.exec(t, `UPDATE `+table+` SET created_at = created_at - make_interval(secs => $2)
			WHERE partition_id IN (SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
			                        WHERE q.name = $1)`, queue, secs)
	}
}

func TestPayloadCheckOffAnswersAsBefore(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	// A queue created by a push, and one configured without the option, and
	// one configured with it off: today's answers, byte for byte.
	b.configure(t, "conf", map[string]any{"dedupWindowSeconds": 600})
	off := b.configure(t, "explicit", map[string]any{"dedupPayloadCheck": "off"})
	require.Equal(t, "off", off["options"].(map[string]any)["dedupPayloadCheck"])
	for _, q := range []string{"auto", "conf", "explicit"} {
		_, first := b.pushBody(t, one(q, "p", "t1", `{"a":1}`))
		require.Equal(t, "queued", first[0].Status)
		raw, _ := b.pushBody(t, one(q, "p", "t1", `{"a":2}`, "t1", `{"a":3}`))
		id := first[0].MessageID
		//nolint:testifylint // byte for byte is the point, JSONEq would not see a reordering
		require.Equal(t, fmt.Sprintf(`[{"index":0,"message_id":"%s","transaction_id":"t1","queueName":"%s","status":"duplicate"},`+
			`{"index":1,"message_id":"%s","transaction_id":"t1","queueName":"%s","status":"duplicate"}]`, id, q, id, q), string(raw))
		_, frames, _, _, next := d.partitionStats(t, q, "p")
		require.Equal(t, []int64{1, 1}, []int64{frames, next})
	}
	require.Zero(t, d.int(t, `SELECT count(*) FROM queen.log_txns WHERE fingerprints IS NOT NULL`), "off stores no fingerprint")
	require.Zero(t, mismatchCounter(t, b, "auto"))
}

func TestPayloadCheckReport(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	conf := b.configure(t, "r", map[string]any{"dedupPayloadCheck": "report"})
	require.Equal(t, "report", conf["options"].(map[string]any)["dedupPayloadCheck"])

	_, first := b.pushBody(t, one("r", "p", "t1", `{"total":42}`))
	require.Equal(t, "queued", first[0].Status)
	mismatch(t, unknown, first[0])
	orig := first[0].MessageID

	// Same payload repeated: a duplicate that matched.
	_, same := b.pushBody(t, one("r", "p", "t1", `{"total":42}`))
	require.Equal(t, "duplicate", same[0].Status)
	require.Equal(t, orig, same[0].MessageID)
	mismatch(t, no, same[0])

	// Different payload: still a duplicate (nothing written), flagged.
	_, diff := b.pushBody(t, one("r", "p", "t1", `{"total":43}`))
	require.Equal(t, "duplicate", diff[0].Status)
	require.Equal(t, orig, diff[0].MessageID)
	require.Empty(t, diff[0].Error)
	mismatch(t, yes, diff[0])
	require.InDelta(t, 1, mismatchCounter(t, b, "r"), 0)

	// In-body repeats: each is judged against the message its answer names,
	// the leader (stored here) or the leader's original.
	_, body := b.pushBody(t, one("r", "p", "t2", `"a"`, "t2", `"a"`, "t2", `"b"`, "t1", `{"total":42}`, "t1", `{"total":7}`))
	require.Equal(t, []string{"queued", "duplicate", "duplicate", "duplicate", "duplicate"},
		[]string{body[0].Status, body[1].Status, body[2].Status, body[3].Status, body[4].Status})
	for _, r := range body[1:3] {
		require.Equal(t, body[0].MessageID, r.MessageID)
	}
	mismatch(t, unknown, body[0])
	mismatch(t, no, body[1])
	mismatch(t, yes, body[2])
	mismatch(t, no, body[3])
	mismatch(t, yes, body[4])
	require.Equal(t, orig, body[3].MessageID)
	require.Equal(t, orig, body[4].MessageID)
	require.InDelta(t, 3, mismatchCounter(t, b, "r"), 0)

	_, frames, _, _, next := d.partitionStats(t, "r", "p")
	require.Equal(t, []int64{2, 2}, []int64{frames, next}, "only t1 and t2 were stored")
	require.Zero(t, d.int(t, `SELECT count(*) FROM queen.log_txns WHERE fingerprints IS NULL`))
}

func TestPayloadCheckReject(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "x", map[string]any{"dedupPayloadCheck": "reject"})

	_, first := b.pushBody(t, one("x", "p", "t1", `{"total":42}`))
	orig := first[0].MessageID
	_, same := b.pushBody(t, one("x", "p", "t1", `{"total":42}`))
	require.Equal(t, "duplicate", same[0].Status)
	require.Equal(t, orig, same[0].MessageID)
	mismatch(t, no, same[0])

	raw, diff := b.pushBody(t, one("x", "p", "t1", `{"total":43}`, "t3", `1`))
	require.Equal(t, "conflict", diff[0].Status, "%s", raw)
	require.Equal(t, orig, diff[0].MessageID)
	require.Contains(t, diff[0].Error, "original message_id "+orig)
	require.Contains(t, diff[0].Error, "different payload")
	mismatch(t, yes, diff[0])
	require.Equal(t, "queued", diff[1].Status, "the other items of the push are not affected")

	// In-body: a repeat with another payload conflicts with its leader.
	_, body := b.pushBody(t, one("x", "p", "t2", `"a"`, "t2", `"b"`, "t2", `"a"`))
	require.Equal(t, []string{"queued", "conflict", "duplicate"}, []string{body[0].Status, body[1].Status, body[2].Status})
	require.Equal(t, body[0].MessageID, body[1].MessageID)
	require.Contains(t, body[1].Error, body[0].MessageID)
	mismatch(t, yes, body[1])
	mismatch(t, no, body[2])

	require.InDelta(t, 2, mismatchCounter(t, b, "x"), 0)
	require.InDelta(t, 2, scrapeProm(t, b).value("regina_dedup_verdicts_total", map[string]string{"queue": "x", "verdict": "conflict"}), 0)
	_, frames, _, _, next := d.partitionStats(t, "x", "p")
	require.Equal(t, []int64{3, 3}, []int64{frames, next}, "t1, t3 and t2 once each: a conflict writes nothing")
	// The stored payload is the original's.
	p := b.pop(t, "x", "p", nil)
	require.JSONEq(t, `{"total":42}`, string(p.Messages[0].Data))
}

func TestPayloadCheckInATransaction(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "r", map[string]any{"dedupPayloadCheck": "report"})
	b.configure(t, "x", map[string]any{"dedupPayloadCheck": "reject"})
	orig := map[string]string{}
	for _, q := range []string{"r", "x"} {
		_, first := b.pushBody(t, one(q, "p", "stored", `{"v":1}`))
		orig[q] = first[0].MessageID
	}
	txn := func(items ...item) (int, map[string]any) {
		code, raw := do(t, "POST", b.URL+"/api/v1/transaction", map[string]any{"operations": []any{
			map[string]any{"type": "push", "items": items}}})
		var out map[string]any
		require.NoError(t, json.Unmarshal(raw, &out), "%s", raw)
		return code, out
	}

	// A stored transaction id with another payload aborts the transaction as
	// a duplicate does; reject names it a conflict.
	code, res := txn(item{"queue": "r", "partition": "p", "transactionId": "fresh-r"},
		item{"queue": "r", "partition": "p", "transactionId": "stored", "payload": map[string]any{"v": 2}})
	require.Equal(t, http.StatusConflict, code, "%v", res)
	require.Equal(t, true, res["payloadMismatch"])
	require.Nil(t, res["status"])
	require.Contains(t, res["error"], "duplicate transactionId")
	code, res = txn(item{"queue": "x", "partition": "p", "transactionId": "fresh-x"},
		item{"queue": "x", "partition": "p", "transactionId": "stored", "payload": map[string]any{"v": 2}})
	require.Equal(t, http.StatusConflict, code, "%v", res)
	require.Equal(t, "conflict", res["status"])
	require.Equal(t, true, res["payloadMismatch"])
	require.Equal(t, orig["x"], res["originalMessageId"])
	require.Contains(t, res["error"], "different payload (original message_id "+orig["x"])
	// Same payload: an ordinary duplicate abort, payload matched.
	code, res = txn(item{"queue": "x", "partition": "p", "transactionId": "stored", "payload": map[string]any{"v": 1}})
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, false, res["payloadMismatch"])
	require.Nil(t, res["status"])

	// Repeats inside the transaction: report flags the follower, reject
	// aborts the whole transaction.
	code, res = txn(item{"queue": "r", "partition": "p", "transactionId": "in", "payload": "a"},
		item{"queue": "r", "partition": "p", "transactionId": "in", "payload": "b"},
		item{"queue": "r", "partition": "p", "transactionId": "in", "payload": "a"})
	require.Equal(t, http.StatusOK, code, "%v", res)
	results := res["results"].([]any)
	require.Equal(t, "queued", results[0].(map[string]any)["status"])
	require.Nil(t, results[0].(map[string]any)["payloadMismatch"])
	require.Equal(t, "duplicate", results[1].(map[string]any)["status"])
	require.Equal(t, true, results[1].(map[string]any)["payloadMismatch"])
	require.Equal(t, false, results[2].(map[string]any)["payloadMismatch"])
	code, res = txn(item{"queue": "x", "partition": "p", "transactionId": "in", "payload": "a"},
		item{"queue": "x", "partition": "p", "transactionId": "in", "payload": "b"})
	require.Equal(t, http.StatusConflict, code, "%v", res)
	require.Equal(t, "conflict", res["status"])

	_, frames, _, _, next := d.partitionStats(t, "r", "p")
	require.Equal(t, []int64{2, 2}, []int64{frames, next}, "r: stored and in")
	_, frames, _, _, next = d.partitionStats(t, "x", "p")
	require.Equal(t, []int64{1, 1}, []int64{frames, next}, "x: only stored; every transaction was rolled back")
}

func TestPayloadCheckWindowAndPurges(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	for _, q := range []string{"r", "x"} {
		mode := map[string]string{"r": "report", "x": "reject"}[q]
		b.configure(t, q, map[string]any{"dedupPayloadCheck": mode, "dedupWindowSeconds": 600})

		// Window expiry: a repeat after the window is a new message, whatever
		// its payload.
		_, first := b.pushBody(t, one(q, "w", "t1", `1`))
		ageQueue(t, d, q, 700)
		_, after := b.pushBody(t, one(q, "w", "t1", `2`))
		require.Equal(t, "queued", after[0].Status)
		mismatch(t, unknown, after[0])
		require.NotEqual(t, first[0].MessageID, after[0].MessageID)

		// The original's segment removed by retention: its fingerprint is in
		// the hash sidecar, so the repeat is still compared (the original's
		// id is the zero UUID).
		b.pushBody(t, one(q, "s", "t1", `1`))
		d.exec(t, `DELETE FROM queen.segments WHERE partition_id = (SELECT p.id FROM queen.partitions p
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND p.name = 's')`, q)
		_, gone := b.pushBody(t, one(q, "s", "t1", `1`, "t1", `2`))
		require.Equal(t, zeroUUID, gone[0].MessageID)
		require.Equal(t, "duplicate", gone[0].Status)
		mismatch(t, no, gone[0])
		mismatch(t, yes, gone[1])
		if mode == "reject" {
			require.Equal(t, "conflict", gone[1].Status)
			require.Contains(t, gone[1].Error, zeroUUID)
			require.Contains(t, gone[1].Error, "removed by retention")
		} else {
			require.Equal(t, "duplicate", gone[1].Status)
		}

		// The original's hashes purged too: a new message.
		d.exec(t, `DELETE FROM queen.log_txns WHERE partition_id = (SELECT p.id FROM queen.partitions p
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND p.name = 's')`, q)
		_, purged := b.pushBody(t, one(q, "s", "t1", `3`))
		require.Equal(t, "queued", purged[0].Status)
	}
}

func TestPayloadCheckSwitchedOnAndOff(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	// Stored while the check was off: no fingerprint, so a repeat is
	// answered as today (mismatch unknown).
	_, first := b.pushBody(t, one("q", "p", "old", `1`))
	b.configure(t, "q", map[string]any{"dedupPayloadCheck": "reject"})
	// The partition's actor still believes the check is off: the push
	// transaction tells it otherwise, and the push is checked.
	raw, res := b.pushBody(t, one("q", "p", "old", `2`, "new", `1`, "new", `2`))
	require.Equal(t, "duplicate", res[0].Status, "%s", raw)
	require.Equal(t, first[0].MessageID, res[0].MessageID)
	mismatch(t, unknown, res[0])
	require.NotContains(t, string(raw[:len(raw)/3]), "payloadMismatch")
	require.Equal(t, "queued", res[1].Status)
	require.Equal(t, "conflict", res[2].Status)
	_, res = b.pushBody(t, one("q", "p", "new", `5`))
	require.Equal(t, "conflict", res[0].Status)

	// Off again: answers as today, nothing more stored.
	b.configure(t, "q", map[string]any{"dedupPayloadCheck": "off"})
	raw, res = b.pushBody(t, one("q", "p", "new", `5`, "newer", `1`))
	require.Equal(t, "duplicate", res[0].Status)
	require.NotContains(t, string(raw), "payloadMismatch")
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.log_txns WHERE fingerprints IS NOT NULL`))

	// Deduplication off (window 0) with a check: nothing is a repeat,
	// nothing is fingerprinted.
	b.configure(t, "z", map[string]any{"dedupPayloadCheck": "reject", "dedupWindowSeconds": 0})
	raw, res = b.pushBody(t, one("z", "p", "t", `1`, "t", `2`))
	require.Equal(t, []string{"queued", "queued"}, []string{res[0].Status, res[1].Status}, "%s", raw)
	require.NotContains(t, string(raw), "payloadMismatch")
	require.Equal(t, int64(1), d.int(t, `SELECT count(*) FROM queen.log_txns WHERE fingerprints IS NOT NULL`))
}

func TestPayloadCheckBadConfigure(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	b.configure(t, "q", map[string]any{"dedupPayloadCheck": "report"})
	for _, v := range []any{"on", "", "Report", 1, true, []string{"off"}} {
		status, body := do(t, "POST", b.URL+"/api/v1/configure",
			map[string]any{"queue": "q", "options": map[string]any{"dedupPayloadCheck": v}})
		require.Equal(t, http.StatusBadRequest, status, "%v: %s", v, body)
		require.JSONEq(t, `{"error":"options.dedupPayloadCheck must be \"off\", \"report\" or \"reject\""}`, string(body))
	}
	// Nothing changed.
	status, body := do(t, "GET", b.URL+"/api/v1/resources/queues/q", nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Contains(t, string(body), `"dedupPayloadCheck":"report"`)
}
