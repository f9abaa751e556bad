package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

type explainOccurrence struct {
	Offset         int64   `json:"offset"`
	MessageID      string  `json:"messageId"`
	StoredAt       string  `json:"storedAt"`
	WindowEndsAt   *string `json:"windowEndsAt"`
	InWindow       bool    `json:"inWindow"`
	SegmentRemoved bool    `json:"segmentRemoved"`
}

type explainResponse struct {
	Queue                 string              `json:"queue"`
	Partition             string              `json:"partition"`
	TransactionID         string              `json:"transactionId"`
	Verdict               string              `json:"verdict"`
	QueueExists           bool                `json:"queueExists"`
	PartitionExists       bool                `json:"partitionExists"`
	PartitionID           *string             `json:"partitionId"`
	WindowSeconds         int                 `json:"windowSeconds"`
	MessageID             *string             `json:"messageId"`
	OriginalUnknown       bool                `json:"originalUnknown"`
	OriginalUnknownReason *string             `json:"originalUnknownReason"`
	StoredAt              *string             `json:"storedAt"`
	WindowEndsAt          *string             `json:"windowEndsAt"`
	Offset                *int64              `json:"offset"`
	Occurrences           []explainOccurrence `json:"occurrences"`
	CheckedAt             string              `json:"checkedAt"`
	Note                  string              `json:"note"`
}

func (b *testBroker) explain(t *testing.T, queue, part, txID string) explainResponse {
	t.Helper()
	q := url.Values{"queue": {queue}, "partition": {part}, "transactionId": {txID}}
	status, body := do(t, "GET", b.URL+"/api/v1/dedup/explain?"+q.Encode(), nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var r explainResponse
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	require.Equal(t, queue, r.Queue)
	require.Equal(t, part, r.Partition)
	require.Equal(t, txID, r.TransactionID)
	require.NotEmpty(t, r.Note)
	return r
}

type lookupResult struct {
	Index         int      `json:"index"`
	Queue         string   `json:"queue"`
	Partition     string   `json:"partition"`
	TransactionID string   `json:"transactionId"`
	Committed     bool     `json:"committed"`
	MessageID     *string  `json:"messageId"`
	MessageIDs    []string `json:"messageIds"`
	PartitionID   *string  `json:"partitionId"`
	StoredAt      *string  `json:"storedAt"`
	InWindow      bool     `json:"inWindow"`
	Verdict       string   `json:"verdict"`
}

func (b *testBroker) lookup(t *testing.T, items ...item) []lookupResult {
	t.Helper()
	if items == nil {
		items = []item{}
	}
	status, body := do(t, "POST", b.URL+"/api/v1/dedup/lookup", map[string]any{"items": items})
	require.Equal(t, http.StatusOK, status, "%s", body)
	var r struct {
		Results []lookupResult `json:"results"`
	}
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	require.Len(t, r.Results, len(items))
	for i := range r.Results {
		require.Equal(t, i, r.Results[i].Index)
	}
	return r.Results
}

func parseTS(t *testing.T, s *string) time.Time {
	t.Helper()
	require.NotNil(t, s)
	ts, err := time.Parse(time.RFC3339Nano, *s)
	require.NoError(t, err)
	return ts
}

// explain agrees with the verdict a push then gets, for each row of the
// seed's "What to expect" table.
func TestExplainAgreesWithPush(t *testing.T) {
	t.Parallel()

	t.Run("duplicate inside the window", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		first := b.push(t, item{"queue": "orders", "partition": "p1", "transactionId": "order:1"})
		e := b.explain(t, "orders", "p1", "order:1")
		require.Equal(t, "duplicate", e.Verdict)
		require.True(t, e.QueueExists)
		require.True(t, e.PartitionExists)
		require.Equal(t, *first[0].PartitionID, *e.PartitionID)
		require.Equal(t, 3600, e.WindowSeconds)
		require.Equal(t, first[0].MessageID, *e.MessageID)
		require.False(t, e.OriginalUnknown)
		require.EqualValues(t, 0, *e.Offset)
		stored, ends := parseTS(t, e.StoredAt), parseTS(t, e.WindowEndsAt)
		require.Equal(t, time.Hour, ends.Sub(stored))
		require.Len(t, e.Occurrences, 1)
		require.True(t, e.Occurrences[0].InWindow)
		_, _, _, _, next := d.partitionStats(t, "orders", "p1")

		dup := b.push(t, item{"queue": "orders", "partition": "p1", "transactionId": "order:1"})
		require.Equal(t, "duplicate", dup[0].Status)
		require.Equal(t, *e.MessageID, dup[0].MessageID)
		_, _, _, _, next2 := d.partitionStats(t, "orders", "p1")
		require.Equal(t, next, next2)
	})

	t.Run("same id in another partition: new", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		b.push(t, item{"queue": "orders", "partition": "p1", "transactionId": "x"})
		e := b.explain(t, "orders", "p2", "x")
		require.Equal(t, "new", e.Verdict)
		require.True(t, e.QueueExists)
		require.False(t, e.PartitionExists, "a push would create it")
		require.Nil(t, e.PartitionID)
		require.Nil(t, e.MessageID)
		require.Contains(t, e.Note, "partition does not exist")
		require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.partitions WHERE name = 'p2'`), "explain creates nothing")
		require.Equal(t, "queued", b.push(t, item{"queue": "orders", "partition": "p2", "transactionId": "x"})[0].Status)

		// An existing partition without the id: new as well.
		b.push(t, item{"queue": "orders", "partition": "p3", "transactionId": "other"})
		e = b.explain(t, "orders", "p3", "x")
		require.Equal(t, "new", e.Verdict)
		require.True(t, e.PartitionExists)
		require.Empty(t, e.Occurrences)
		require.Equal(t, "queued", b.push(t, item{"queue": "orders", "partition": "p3", "transactionId": "x"})[0].Status)
	})

	t.Run("after the window: expired, then a push is queued", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		b.configure(t, "orders", map[string]any{"dedupWindowSeconds": 60})
		first := b.push(t, item{"queue": "orders", "transactionId": "late"})
		require.Equal(t, "duplicate", b.explain(t, "orders", "Default", "late").Verdict)
		d.exec(t, `UPDATE queen.log_txns SET created_at = created_at - interval '61 seconds'`)
		d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '61 seconds'`)

		e := b.explain(t, "orders", "Default", "late")
		require.Equal(t, "expired", e.Verdict)
		require.Equal(t, 60, e.WindowSeconds)
		require.Equal(t, first[0].MessageID, *e.MessageID, "the stored copy is named")
		require.True(t, parseTS(t, e.WindowEndsAt).Before(parseTS(t, &e.CheckedAt)), "its window has ended")
		require.False(t, e.Occurrences[0].InWindow)

		again := b.push(t, item{"queue": "orders", "transactionId": "late"})
		require.Equal(t, "queued", again[0].Status)
		// Now the new copy is the original a push would name.
		e = b.explain(t, "orders", "Default", "late")
		require.Equal(t, "duplicate", e.Verdict)
		require.Equal(t, again[0].MessageID, *e.MessageID)
		require.Len(t, e.Occurrences, 2)
		require.Equal(t, "duplicate", b.push(t, item{"queue": "orders", "transactionId": "late"})[0].Status)
	})

	t.Run("original segment removed by retention: duplicate with the zero UUID", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		b.configure(t, "orders", map[string]any{"retentionEnabled": true, "retentionSeconds": 60})
		b.push(t, item{"queue": "orders", "transactionId": "gone"})
		d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '2 minutes'`)
		st := sqlstoretest.OpenSchema(t, b.Schema)
		stats, err := st.RetainOnce(context.Background(), 10)
		require.NoError(t, err)
		require.Equal(t, int64(1), stats.Segments)

		e := b.explain(t, "orders", "Default", "gone")
		require.Equal(t, "duplicate", e.Verdict)
		require.Equal(t, zeroUUID, *e.MessageID)
		require.True(t, e.OriginalUnknown)
		require.Contains(t, *e.OriginalUnknownReason, "retention")
		require.NotNil(t, e.StoredAt, "the stored time survives in the sidecar")
		require.True(t, e.Occurrences[0].SegmentRemoved)

		dup := b.push(t, item{"queue": "orders", "transactionId": "gone"})
		require.Equal(t, "duplicate", dup[0].Status)
		require.Equal(t, zeroUUID, dup[0].MessageID)
	})

	t.Run("window 0: disabled", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		b.configure(t, "orders", map[string]any{"dedupWindowSeconds": 0})
		first := b.push(t, item{"queue": "orders", "transactionId": "same"})
		e := b.explain(t, "orders", "Default", "same")
		require.Equal(t, "disabled", e.Verdict)
		require.Equal(t, 0, e.WindowSeconds)
		require.Equal(t, first[0].MessageID, *e.MessageID, "the stored copy is still reported")
		require.Nil(t, e.WindowEndsAt)
		again := b.push(t, item{"queue": "orders", "transactionId": "same"})
		require.Equal(t, "queued", again[0].Status)
		e = b.explain(t, "orders", "Default", "same")
		require.Equal(t, "disabled", e.Verdict)
		require.Len(t, e.Occurrences, 2)
		require.Equal(t, again[0].MessageID, *e.MessageID, "the newest copy")
	})

	t.Run("unknown queue: new, nothing created", func(t *testing.T) {
		t.Parallel()
		b := startBroker(t, "", nil)
		d := newDB(t, b.Schema)
		e := b.explain(t, "nope", "Default", "t")
		require.Equal(t, "new", e.Verdict)
		require.False(t, e.QueueExists)
		require.False(t, e.PartitionExists)
		require.Equal(t, 3600, e.WindowSeconds, "the window a push would create it with")
		require.Contains(t, e.Note, "queue does not exist")
		require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.queues`))
		require.Equal(t, "queued", b.push(t, item{"queue": "nope", "transactionId": "t"})[0].Status)
	})
}

// TestExplainIsConsistentWithPush: explain and lookup take a missing
// partition as Default, as a push does, and refuse with the push's 400 and
// text what a push would refuse (an over-long or non-UTF-8 transactionId, an
// over-long queue or partition name), writing nothing.
//
// The refusals run one after another: as parallel subtests they waited for
// a free slot behind the package's other tests (-parallel), 15-45 s in
// loaded runs, with the broker idling all along, for three requests each.
//
//nolint:tparallel // the refusals are three requests each: not worth a parallel slot
func TestExplainIsConsistentWithPush(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	first := b.push(t, item{"queue": "orders", "transactionId": "order:1"})[0]
	q := url.Values{"queue": {"orders"}, "transactionId": {"order:1"}}
	status, body := do(t, "GET", b.URL+"/api/v1/dedup/explain?"+q.Encode(), nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var e explainResponse
	require.NoError(t, json.Unmarshal(body, &e))
	require.Equal(t, "Default", e.Partition)
	require.Equal(t, "duplicate", e.Verdict)
	require.Equal(t, first.MessageID, *e.MessageID)
	res := b.lookup(t, item{"queue": "orders", "partition": "", "transactionId": "order:1"})
	require.Equal(t, "Default", res[0].Partition)
	require.True(t, res[0].Committed)

	d := newDB(t, b.Schema)
	before := d.int(t, `SELECT count(*) FROM queen.partitions`)
	t.Run("refused", func(t *testing.T) {
		for name, it := range map[string]map[string]string{
			"5000-byte transactionId": {"queue": "orders", "transactionId": strings.Repeat("t", 5000)},
			"256-byte queue":          {"queue": strings.Repeat("q", 256), "transactionId": "t"},
			"256-byte partition":      {"queue": "orders", "partition": strings.Repeat("p", 256), "transactionId": "t"},
		} {
			t.Run(name, func(t *testing.T) {
				body := map[string]any{"items": []map[string]string{it}}
				status, out := do(t, "POST", b.URL+"/api/v1/push", body)
				require.Equal(t, http.StatusBadRequest, status, "%s", out)
				want := strings.TrimPrefix(errorText(t, out), "items[0]: ")

				v := url.Values{}
				for k, x := range it {
					v.Set(k, x)
				}
				status, out = do(t, "GET", b.URL+"/api/v1/dedup/explain?"+v.Encode(), nil)
				require.Equal(t, http.StatusBadRequest, status, "%s", out)
				require.Equal(t, want, errorText(t, out))

				status, out = do(t, "POST", b.URL+"/api/v1/dedup/lookup", body)
				require.Equal(t, http.StatusBadRequest, status, "%s", out)
				require.Equal(t, "items[0]: "+want, errorText(t, out))
			})
		}
	})
	require.Equal(t, before, d.int(t, `SELECT count(*) FROM queen.partitions`), "refused requests wrote nothing")
}

// errorText is the error field of a JSON error answer.
func errorText(t *testing.T, body []byte) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &e), "%s", body)
	return e.Error
}

func TestExplainAndLookupBadInput(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	for _, q := range []string{"", "queue=q", "queue=q&partition=p", "partition=p&transactionId=t"} {
		status, body := do(t, "GET", b.URL+"/api/v1/dedup/explain?"+q, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", q, body)
		require.Contains(t, string(body), "required")
	}
	status, _ := do(t, "POST", b.URL+"/api/v1/dedup/explain?queue=q&partition=p&transactionId=t", nil)
	require.Equal(t, http.StatusMethodNotAllowed, status)

	for _, body := range []string{``, `[]`, `{}`, `{"items":{}}`, `{"items":[1]}`, `{"items":[{"partition":"p","transactionId":"t"}]}`,
		`{"items":[{"queue":"q"}]}`, `{"items":[{"queue":"q","transactionId":7}]}`, `{"items":[{"queue":"q","partition":3,"transactionId":"t"}]}`,
		`{"items":[{"queue":"","transactionId":"t"}]}`} {
		status, out := do(t, "POST", b.URL+"/api/v1/dedup/lookup", body)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", body, out)
	}
	many := make([]item, 1001)
	for i := range many {
		many[i] = item{"queue": "q", "transactionId": strconv.Itoa(i)}
	}
	status, out := do(t, "POST", b.URL+"/api/v1/dedup/lookup", map[string]any{"items": many})
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(out), "1000")
	// Exactly 1000 is fine.
	require.Len(t, b.lookup(t, many[:1000]...), 1000)
	require.Empty(t, b.lookup(t))
}

// tableFingerprint is every table's row count and xmin sum, and every
// partition's next_offset: any insert, update or delete changes it.
func tableFingerprint(t *testing.T, d *db) []string {
	t.Helper()
	var out []string
	for _, tbl := range []string{"queues", "partitions", "segments", "log_txns", "consumers", "consumer_groups", "dlq"} {
		var n, x int64
		require.NoError(t, d.pool.QueryRow(context.Background(), d.q(
			`SELECT count(*), coalesce(sum(xmin::text::bigint), 0)::bigint FROM queen.`+tbl)).Scan(&n, &x))
		out = append(out, fmt.Sprintf("%s:%d:%d", tbl, n, x))
	}
	rows, err := d.pool.Query(context.Background(), d.q(`SELECT name || '=' || next_offset FROM queen.partitions ORDER BY id`))
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// A relay that crashed reconciles through lookup: committed or not, with the
// original ids, and lookup writes nothing (not even for an unknown queue).
func TestLookupReconcilesAndNeverWrites(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "off", map[string]any{"dedupWindowSeconds": 0})
	sent := b.push(t, item{"queue": "outbox", "partition": "c1", "transactionId": "evt:1"},
		item{"queue": "outbox", "transactionId": "evt:2"},
		item{"queue": "off", "transactionId": "rep"}, item{"queue": "off", "transactionId": "rep"})
	before := tableFingerprint(t, d)

	res := b.lookup(t,
		item{"queue": "outbox", "partition": "c1", "transactionId": "evt:1"},
		item{"queue": "outbox", "transactionId": "evt:2"},
		item{"queue": "outbox", "partition": "c1", "transactionId": "evt:3"},
		item{"queue": "outbox", "partition": "c2", "transactionId": "evt:1"},
		item{"queue": "ghost", "partition": "p", "transactionId": "evt:1"},
		item{"queue": "off", "transactionId": "rep"},
	)
	require.True(t, res[0].Committed)
	require.Equal(t, sent[0].MessageID, *res[0].MessageID)
	require.Equal(t, []string{sent[0].MessageID}, res[0].MessageIDs)
	require.Equal(t, *sent[0].PartitionID, *res[0].PartitionID)
	require.True(t, res[0].InWindow)
	require.Equal(t, "duplicate", res[0].Verdict)
	require.True(t, res[1].Committed, "a missing partition is Default, as in a push")
	require.Equal(t, "Default", res[1].Partition)
	require.Equal(t, sent[1].MessageID, *res[1].MessageID)
	require.False(t, res[2].Committed)
	require.Nil(t, res[2].MessageID)
	require.Empty(t, res[2].MessageIDs)
	require.Equal(t, "new", res[2].Verdict)
	require.False(t, res[3].Committed, "per partition")
	require.Nil(t, res[3].PartitionID)
	require.False(t, res[4].Committed)
	require.Equal(t, "new", res[4].Verdict)
	require.True(t, res[5].Committed)
	require.Equal(t, []string{sent[2].MessageID, sent[3].MessageID}, res[5].MessageIDs, "every stored copy, in offset order")
	require.Equal(t, "disabled", res[5].Verdict)

	require.Equal(t, before, tableFingerprint(t, d), "lookup wrote nothing")
	require.Equal(t, int64(0), d.int(t, `SELECT count(*) FROM queen.queues WHERE name = 'ghost'`), "no queue created")

	// The answers agree with what the re-sends then get.
	resend := b.push(t, item{"queue": "outbox", "partition": "c1", "transactionId": "evt:1"},
		item{"queue": "outbox", "partition": "c1", "transactionId": "evt:3"})
	require.Equal(t, []string{"duplicate", "queued"}, statuses(resend))
	require.Equal(t, *res[0].MessageID, resend[0].MessageID)
}
