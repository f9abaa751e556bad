package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// explainPayload is GET /api/v1/dedup/explain with a payload, decoded
// loosely (the payload fields included).
func (b *testBroker) explainPayload(t *testing.T, queue, txID, payload string) map[string]any {
	t.Helper()
	q := url.Values{"queue": {queue}, "partition": {"p"}, "transactionId": {txID}, "payload": {payload}}
	status, body := do(t, "GET", b.URL+"/api/v1/dedup/explain?"+q.Encode(), nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var r map[string]any
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	return r
}

// Explain and lookup, given a payload, answer what a push of it would get:
// the fingerprint match, and conflict under dedupPayloadCheck reject.
func TestExplainAndLookupComparePayloads(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	b.configure(t, "r", map[string]any{"dedupPayloadCheck": "report"})
	b.configure(t, "x", map[string]any{"dedupPayloadCheck": "reject"})
	for _, q := range []string{"r", "x", "off"} {
		b.pushBody(t, one(q, "p", "t1", `{"total":42}`))
	}

	same := b.explainPayload(t, "r", "t1", `{"total":42}`)
	require.Equal(t, "duplicate", same["verdict"])
	require.Equal(t, "report", same["payloadCheck"])
	require.Equal(t, false, same["payloadMismatch"])
	require.Len(t, same["payloadFingerprint"], 16)
	occ := same["occurrences"].([]any)[0].(map[string]any)
	require.Equal(t, same["payloadFingerprint"], occ["payloadFingerprint"], "the stored fingerprint is the given payload's")

	for _, q := range []string{"r", "x"} {
		e := b.explainPayload(t, q, "t1", `{"total":43}`)
		require.Equal(t, true, e["payloadMismatch"])
		require.NotEqual(t, same["payloadFingerprint"], e["payloadFingerprint"])
		_, res := b.pushBody(t, one(q, "p", "t1", `{"total":43}`))
		if q == "x" {
			require.Equal(t, "conflict", e["verdict"])
			require.Contains(t, e["note"], "conflict")
		} else {
			require.Equal(t, "duplicate", e["verdict"])
			require.Contains(t, e["note"], "another payload")
		}
		require.Equal(t, e["verdict"], res[0].Status, "explain agrees with the push")
		mismatch(t, yes, res[0])
	}

	// No payload given: nothing compared. Stored without a fingerprint
	// (check off): cannot be told.
	q := url.Values{"queue": {"x"}, "partition": {"p"}, "transactionId": {"t1"}}
	status, body := do(t, "GET", b.URL+"/api/v1/dedup/explain?"+q.Encode(), nil)
	require.Equal(t, http.StatusOK, status)
	var plain map[string]any
	require.NoError(t, json.Unmarshal(body, &plain))
	require.Equal(t, "duplicate", plain["verdict"])
	require.Nil(t, plain["payloadMismatch"])
	require.Nil(t, plain["payloadFingerprint"])
	off := b.explainPayload(t, "off", "t1", `{"total":43}`)
	require.Equal(t, "duplicate", off["verdict"])
	require.Equal(t, "off", off["payloadCheck"])
	require.Nil(t, off["payloadMismatch"])
	require.Nil(t, off["occurrences"].([]any)[0].(map[string]any)["payloadFingerprint"])

	for _, bad := range []string{"", "{nope", "1 2"} {
		q := url.Values{"queue": {"x"}, "partition": {"p"}, "transactionId": {"t1"}, "payload": {bad}}
		status, body := do(t, "GET", b.URL+"/api/v1/dedup/explain?"+q.Encode(), nil)
		require.Equal(t, http.StatusBadRequest, status, "%q: %s", bad, body)
		require.Contains(t, string(body), "payload must be one JSON value")
	}

	status, body = do(t, "POST", b.URL+"/api/v1/dedup/lookup", `{"items":[
		{"queue":"x","partition":"p","transactionId":"t1","payload":{"total":42}},
		{"queue":"x","partition":"p","transactionId":"t1","payload":{"total":43}},
		{"queue":"x","partition":"p","transactionId":"t1"},
		{"queue":"x","partition":"p","transactionId":"never","payload":1}]}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var lk struct {
		Results []map[string]any `json:"results"`
	}
	require.NoError(t, json.Unmarshal(body, &lk), "%s", body)
	require.Equal(t, []any{false, true, nil, nil}, []any{lk.Results[0]["payloadMismatch"], lk.Results[1]["payloadMismatch"],
		lk.Results[2]["payloadMismatch"], lk.Results[3]["payloadMismatch"]})
	require.Equal(t, []any{"duplicate", "conflict", "duplicate", "new"}, []any{lk.Results[0]["verdict"], lk.Results[1]["verdict"],
		lk.Results[2]["verdict"], lk.Results[3]["verdict"]})
}
