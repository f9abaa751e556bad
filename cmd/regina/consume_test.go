package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/regina-mq/regina/sqlstore/sqlstoretest"
)

type popMessage struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	CreatedAt     string          `json:"createdAt"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	PartitionID   string          `json:"partitionId"`
	LeaseID       string          `json:"leaseId"`
	ConsumerGroup string          `json:"consumerGroup"`
}

type popResponse struct {
	Success           bool         `json:"success"`
	Queue             string       `json:"queue"`
	Partition         string       `json:"partition"`
	PartitionID       string       `json:"partitionId"`
	LeaseID           string       `json:"leaseId"`
	ConsumerGroup     string       `json:"consumerGroup"`
	PartitionsClaimed int          `json:"partitionsClaimed"`
	Messages          []popMessage `json:"messages"`
}

// pop calls the pop route (any partition when part is empty) and returns
// the response, empty on 204.
func (b *testBroker) pop(t *testing.T, queue, part string, params url.Values) popResponse {
	t.Helper()
	u := b.URL + "/api/v1/pop/queue/" + url.PathEscape(queue)
	if part != "" {
		u += "/partition/" + url.PathEscape(part)
	}
	if params != nil {
		u += "?" + params.Encode()
	}
	status, body := do(t, "GET", u, nil)
	if status == http.StatusNoContent {
		require.Empty(t, body)
		return popResponse{}
	}
	require.Equal(t, http.StatusOK, status, "pop answered %s", body)
	var r popResponse
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	require.True(t, r.Success)
	require.NotEmpty(t, r.Messages)
	return r
}

type ackResult struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     string  `json:"queueName"`
	PartitionName string  `json:"partitionName"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

func (b *testBroker) ack(t *testing.T, m popMessage, status, group string) ackResult {
	t.Helper()
	req := map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID,
		"status": status, "error": "boom"}
	if group != "" {
		req["consumerGroup"] = group
	}
	code, body := do(t, "POST", b.URL+"/api/v1/ack", req)
	require.Equal(t, http.StatusOK, code, "%s", body)
	var rs []ackResult
	require.NoError(t, json.Unmarshal(body, &rs), "%s", body)
	require.Len(t, rs, 1)
	return rs[0]
}

func (b *testBroker) ackBatch(t *testing.T, ms []popMessage, status, group string) []ackResult {
	t.Helper()
	acks := make([]map[string]any, len(ms))
	for i, m := range ms {
		acks[i] = map[string]any{"transactionId": m.TransactionID, "partitionId": m.PartitionID, "leaseId": m.LeaseID, "status": status}
	}
	req := map[string]any{"acknowledgments": acks}
	if group != "" {
		req["consumerGroup"] = group
	}
	code, body := do(t, "POST", b.URL+"/api/v1/ack/batch", req)
	require.Equal(t, http.StatusOK, code, "%s", body)
	var rs []ackResult
	require.NoError(t, json.Unmarshal(body, &rs), "%s", body)
	require.Len(t, rs, len(ms))
	return rs
}

func pushN(t *testing.T, b *testBroker, queue, part string, from, n int) {
	t.Helper()
	items := make([]item, n)
	for i := range items {
		items[i] = item{"queue": queue, "partition": part, "transactionId": fmt.Sprintf("%s-%s-%d", queue, part, from+i),
			"payload": map[string]any{"n": from + i}}
	}
	for _, r := range b.push(t, items...) {
		require.Equal(t, "queued", r.Status)
	}
}

func TestPopReadsYourWritesAndAckReleases(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	trace := "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
	pushed := b.push(t, item{"queue": "orders", "transactionId": "o1", "payload": map[string]any{"total": 42}, "traceId": trace})

	// Default is read through the any-partition route, as clients do.
	r := b.pop(t, "orders", "", nil)
	require.Len(t, r.Messages, 1)
	m := r.Messages[0]
	require.Equal(t, pushed[0].MessageID, m.ID)
	require.Equal(t, "o1", m.TransactionID)
	require.JSONEq(t, `{"total":42}`, string(m.Data))
	require.Equal(t, trace, *m.TraceID)
	require.Equal(t, "Default", m.Partition)
	require.Equal(t, *pushed[0].PartitionID, m.PartitionID)
	require.Equal(t, "__QUEUE_MODE__", r.ConsumerGroup)
	require.Equal(t, r.LeaseID, m.LeaseID)
	require.Equal(t, 1, r.PartitionsClaimed)
	_, err := time.Parse("2006-01-02T15:04:05.000000Z", m.CreatedAt)
	require.NoError(t, err, "createdAt has microseconds: %s", m.CreatedAt)

	// While leased, nothing more is handed out.
	require.Empty(t, b.pop(t, "orders", "", nil).Messages)
	a := b.ack(t, m, "completed", "")
	require.True(t, a.Success)
	require.Nil(t, a.Error)
	require.True(t, a.LeaseReleased)
	require.Equal(t, "orders", a.QueueName)
	require.Equal(t, "Default", a.PartitionName)
	require.Empty(t, b.pop(t, "orders", "", nil).Messages, "acked: nothing left")
	// Acks are idempotent.
	require.True(t, b.ack(t, m, "completed", "").Success)

	pushN(t, b, "orders", "Default", 100, 3)
	r = b.pop(t, "orders", "", url.Values{"batch": {"10"}})
	require.Len(t, r.Messages, 3)
	// A pop on a queue that does not exist is empty, not an error.
	require.Empty(t, b.pop(t, "nope", "", nil).Messages)
}

func TestFIFOUnderConcurrentConsumers(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	const n = 120
	for i := 0; i < n; i += 20 {
		pushN(t, b, "fifo", "p", i, 20)
	}
	var mu sync.Mutex
	var got []int
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				r := b.pop(t, "fifo", "p", url.Values{"batch": {"7"}})
				if len(r.Messages) == 0 {
					mu.Lock()
					done := len(got) >= n
					mu.Unlock()
					if done {
						return
					}
					continue
				}
				var batch []int
				for _, m := range r.Messages {
					var p struct{ N int }
					require.NoError(t, json.Unmarshal(m.Data, &p))
					batch = append(batch, p.N)
				}
				mu.Lock()
				// Batches are handed out strictly in order: one in flight.
				require.Len(t, got, batch[0], "batch starts where the previous ended")
				got = append(got, batch...)
				mu.Unlock()
				for _, a := range b.ackBatch(t, r.Messages, "completed", "") {
					require.True(t, a.Success, "%v", a.Error)
				}
			}
		})
	}
	wg.Wait()
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, got)
}

func TestQueueModeAndNamedGroups(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	pushN(t, b, "bus", "Default", 0, 5)
	for _, g := range []string{"", "billing", "audit"} {
		params := url.Values{"batch": {"10"}}
		if g != "" {
			params.Set("consumerGroup", g)
		}
		r := b.pop(t, "bus", "", params)
		require.Len(t, r.Messages, 5, "group %q sees every message", g)
		for _, a := range b.ackBatch(t, r.Messages, "completed", g) {
			require.True(t, a.Success)
		}
		require.Empty(t, b.pop(t, "bus", "", params).Messages)
	}
}

func TestCompetingConsumersNeverShareALiveLease(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	pushN(t, b, "work", "p", 0, 10)
	r := b.pop(t, "work", "p", url.Values{"batch": {"3"}})
	require.Len(t, r.Messages, 3)
	// The named-partition form answers empty (lease_held) while it is live.
	require.Empty(t, b.pop(t, "work", "p", url.Values{"batch": {"3"}}).Messages)
	require.Empty(t, b.pop(t, "work", "", url.Values{"batch": {"3"}}).Messages)
	// Acking the whole batch releases the lease; the next batch follows.
	for _, a := range b.ackBatch(t, r.Messages, "completed", "") {
		require.True(t, a.LeaseReleased)
	}
	r2 := b.pop(t, "work", "p", url.Values{"batch": {"3"}})
	require.Equal(t, "work-p-3", r2.Messages[0].TransactionID)
	require.NotEqual(t, r.LeaseID, r2.LeaseID)
}

func TestLeaseExpiryRedeliversAndExtendKeepsIt(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "lease", map[string]any{"leaseTime": 30})
	pushN(t, b, "lease", "Default", 0, 3)
	r := b.pop(t, "lease", "", url.Values{"batch": {"3"}})
	require.Len(t, r.Messages, 3)
	require.True(t, b.ack(t, r.Messages[0], "completed", "").Success)

	// Extend: answer both expiresAt and newExpiresAt, later than before.
	var before time.Time
	require.NoError(t, d.pool.QueryRow(context.Background(), d.q(`SELECT lease_expires_at FROM queen.consumers`)).Scan(&before))
	code, body := do(t, "POST", b.URL+"/api/v1/lease/"+r.LeaseID+"/extend", map[string]any{"seconds": 600})
	require.Equal(t, http.StatusOK, code)
	var ext []map[string]any
	require.NoError(t, json.Unmarshal(body, &ext))
	require.Equal(t, true, ext[0]["success"], "%s", body)
	require.Equal(t, ext[0]["expiresAt"], ext[0]["newExpiresAt"])
	exp, err := time.Parse(time.RFC3339, ext[0]["newExpiresAt"].(string))
	require.NoError(t, err)
	require.True(t, exp.After(before.Add(500*time.Second)), "extended to ~600s from now")
	require.Empty(t, b.pop(t, "lease", "", nil).Messages, "the extended lease is still held")

	// Expire it (instead of waiting): the un-acked rest is handed out again,
	// with no retry counted.
	d.exec(t, `UPDATE queen.consumers SET lease_expires_at = now() - interval '1 second', avail_at = now() - interval '1 second'`)
	r2 := b.pop(t, "lease", "", url.Values{"batch": {"10"}})
	require.Equal(t, []string{"lease-Default-1", "lease-Default-2"}, []string{r2.Messages[0].TransactionID, r2.Messages[1].TransactionID})
	require.Len(t, r2.Messages, 2)
	require.Equal(t, int64(0), d.int(t, `SELECT retry_count FROM queen.consumers`))
	// The old lease no longer validates acks; the new one does.
	old := r2.Messages[0]
	old.LeaseID = r.LeaseID
	a := b.ack(t, old, "completed", "")
	require.False(t, a.Success)
	require.Equal(t, "Invalid or expired lease", *a.Error)
	require.True(t, b.ack(t, r2.Messages[0], "completed", "").Success)

	code, body = do(t, "POST", b.URL+"/api/v1/lease/"+r.LeaseID+"/extend", map[string]any{})
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"success":false`)
}

func TestFailedAcksReachTheDLQAtRetryLimit(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	b.configure(t, "jobs", map[string]any{"retryLimit": 2})
	pushN(t, b, "jobs", "Default", 0, 1)
	pushN(t, b, "jobs", "Default", 1, 1)
	for attempt := 1; attempt <= 3; attempt++ {
		r := b.pop(t, "jobs", "", nil)
		require.Len(t, r.Messages, 1)
		require.Equal(t, "jobs-Default-0", r.Messages[0].TransactionID, "delivery %d", attempt)
		a := b.ack(t, r.Messages[0], "failed", "")
		require.True(t, a.Success)
		require.Equal(t, attempt == 3, a.DLQ, "retryLimit 2: the 3rd failure goes to the DLQ")
	}
	r := b.pop(t, "jobs", "", nil)
	require.Equal(t, "jobs-Default-1", r.Messages[0].TransactionID, "the cursor moved past the dead letter")

	code, body := do(t, "GET", b.URL+"/api/v1/dlq?queue=jobs", nil)
	require.Equal(t, http.StatusOK, code)
	var dlq struct {
		Messages []struct {
			TransactionID string          `json:"transactionId"`
			ErrorMessage  string          `json:"errorMessage"`
			RetryCount    int             `json:"retryCount"`
			Data          json.RawMessage `json:"data"`
			Queue         string          `json:"queue"`
			ConsumerGroup string          `json:"consumerGroup"`
		} `json:"messages"`
		Total int `json:"total"`
	}
	require.NoError(t, json.Unmarshal(body, &dlq), "%s", body)
	require.Equal(t, 1, dlq.Total)
	require.Equal(t, "jobs-Default-0", dlq.Messages[0].TransactionID)
	require.Equal(t, "boom", dlq.Messages[0].ErrorMessage)
	require.Equal(t, 2, dlq.Messages[0].RetryCount)
	require.JSONEq(t, `{"n":0}`, string(dlq.Messages[0].Data))
	require.Equal(t, "__QUEUE_MODE__", dlq.Messages[0].ConsumerGroup)

	// Filters: another queue, another group, a time range in the future.
	for _, q := range []string{"queue=other", "queue=jobs&consumerGroup=g", "from=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))} {
		_, body := do(t, "GET", b.URL+"/api/v1/dlq?"+q, nil)
		require.Contains(t, string(body), `"total":0`, q)
	}
	// Straight to the DLQ with status dlq.
	require.True(t, b.ack(t, r.Messages[0], "dlq", "").DLQ)
	_, body = do(t, "GET", b.URL+"/api/v1/dlq?queue=jobs&limit=1", nil)
	require.Contains(t, string(body), `"total":2`)
	require.Contains(t, string(body), `"pagination":{"limit":1,"offset":0}`)
}

func TestSubscriptionModeNewSkipsHistory(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	pushN(t, b, "hist", "a", 0, 3)
	g := url.Values{"consumerGroup": {"late"}, "subscriptionMode": {"new"}, "batch": {"10"}}
	require.Empty(t, b.pop(t, "hist", "", g).Messages, "history is skipped")
	pushN(t, b, "hist", "a", 3, 2)
	pushN(t, b, "hist", "b", 0, 1) // a partition created after the group started
	r := b.pop(t, "hist", "", url.Values{"consumerGroup": {"late"}, "batch": {"10"}, "partitions": {"2"}})
	var ids []string
	for _, m := range r.Messages {
		ids = append(ids, m.TransactionID)
	}
	sort.Strings(ids)
	require.Equal(t, []string{"hist-a-3", "hist-a-4", "hist-b-0"}, ids)
	require.Equal(t, 2, r.PartitionsClaimed)
	// A group without a mode reads from the beginning.
	require.Len(t, b.pop(t, "hist", "a", url.Values{"consumerGroup": {"all"}, "batch": {"10"}}).Messages, 5)
}

// TestSubscriptionModeValues pins every subscriptionMode Queen's clients
// send: all and from_beginning read a new group's history, new and new-only
// skip it, anything else is a 400 naming the accepted values that creates
// nothing.
func TestSubscriptionModeValues(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	pushN(t, b, "modes", "a", 0, 3)
	for mode, want := range map[string]int{"all": 3, "from_beginning": 3, "new": 0, "new-only": 0, "": 3} {
		group := "g-" + mode
		r := b.pop(t, "modes", "", url.Values{"consumerGroup": {group}, "subscriptionMode": {mode}, "batch": {"10"}})
		require.Len(t, r.Messages, want, "subscriptionMode=%q", mode)
		// On both routes.
		r = b.pop(t, "modes", "a", url.Values{"consumerGroup": {group + "-p"}, "subscriptionMode": {mode}, "batch": {"10"}})
		require.Len(t, r.Messages, want, "subscriptionMode=%q, named partition", mode)
	}
	// The groups that skipped history get what comes next.
	pushN(t, b, "modes", "a", 3, 1)
	for _, g := range []string{"g-new", "g-new-only"} {
		r := b.pop(t, "modes", "", url.Values{"consumerGroup": {g}, "batch": {"10"}})
		require.Len(t, r.Messages, 1, g)
		require.Equal(t, "modes-a-3", r.Messages[0].TransactionID)
	}

	for _, bad := range []string{"NEW", "latest", "from-beginning"} {
		for _, path := range []string{"/api/v1/pop/queue/modes", "/api/v1/pop/queue/modes/partition/a"} {
			code, body := do(t, "GET", b.URL+path+"?consumerGroup=bad&subscriptionMode="+bad, nil)
			require.Equal(t, http.StatusBadRequest, code, "%s", body)
			var e struct{ Error string }
			require.NoError(t, json.Unmarshal(body, &e), "%s", body)
			require.Equal(t, fmt.Sprintf("subscriptionMode %q is not one of all, from_beginning, new, new-only (empty means all)", bad), e.Error)
		}
	}
	// The refused pops created no group.
	_, body := do(t, "GET", b.URL+"/api/v1/consumer-groups/bad", nil)
	require.JSONEq(t, `{}`, string(body))
}

// TestDefaultSubscriptionMode: DEFAULT_SUBSCRIPTION_MODE applies to pops
// that name no mode; an explicit one wins.
func TestDefaultSubscriptionMode(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) { c.DefaultSubscriptionMode = "new" })
	pushN(t, b, "dflt", "a", 0, 2)
	require.Empty(t, b.pop(t, "dflt", "", url.Values{"consumerGroup": {"late"}, "batch": {"10"}}).Messages)
	require.Len(t, b.pop(t, "dflt", "", url.Values{"consumerGroup": {"early"}, "subscriptionMode": {"from_beginning"},
		"batch": {"10"}}).Messages, 2)
	// Queue mode ignores subscriptions.
	require.Len(t, b.pop(t, "dflt", "", url.Values{"batch": {"10"}}).Messages, 2)
}

func TestLongPoll(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	// Empty after the timeout: 204.
	code, body := do(t, "GET", b.URL+"/api/v1/pop/queue/lp?wait=true&timeout=200", nil)
	require.Equal(t, http.StatusNoContent, code)
	require.Empty(t, body)

	got := make(chan popResponse, 1)
	go func() {
		got <- b.pop(t, "lp", "", url.Values{"wait": {"true"}, "timeout": {"30000"}})
	}()
	// The pop is waiting once it has looked and found nothing; a push then
	// wakes it (whether it landed before or after the look, the pop sees it).
	b.push(t, item{"queue": "lp", "transactionId": "wake"})
	r := <-got
	require.Len(t, r.Messages, 1)
	require.Equal(t, "wake", r.Messages[0].TransactionID)
}

func TestUnresolvableAckAndDedupOffAcks(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "off", map[string]any{"dedupWindowSeconds": 0})
	pushN(t, b, "off", "Default", 0, 2)
	r := b.pop(t, "off", "", url.Values{"batch": {"2"}})
	for _, a := range b.ackBatch(t, r.Messages, "completed", "") {
		require.True(t, a.Success, "acks resolve on a dedup-off queue")
	}

	pushN(t, b, "aged", "Default", 0, 1)
	r = b.pop(t, "aged", "", nil)
	// The sidecar row ages out and retention drops it with its child.
	d.exec(t, `SELECT queen.sidecar_ensure(now() - interval '3 hours', now(), interval '1 hour')`)
	d.exec(t, `UPDATE queen.log_txns SET created_at = created_at - interval '2 hours'`)
	st := sqlstoretest.OpenSchema(t, b.Schema)
	_, err := st.RetainOnce(context.Background(), 100)
	require.NoError(t, err)
	a := b.ack(t, r.Messages[0], "completed", "")
	require.False(t, a.Success, "never a silent success")
	require.Equal(t, "unresolvable", *a.Error)
}

func TestTwoBrokersConsumeWithoutDoubleDelivery(t *testing.T) {
	t.Parallel()
	schema := sqlstoretest.NewSchema(t)
	b1 := startBroker(t, schema, nil)
	b2 := startBroker(t, schema, nil)
	const perPartition = 30
	for p := range 4 {
		pushN(t, b1, "shared", fmt.Sprintf("p%d", p), 0, perPartition)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			b := []*testBroker{b1, b2}[w%2]
			for empty := 0; empty < 3; {
				r := b.pop(t, "shared", "", url.Values{"batch": {"4"}})
				if len(r.Messages) == 0 {
					empty++
					continue
				}
				empty = 0
				mu.Lock()
				for _, m := range r.Messages {
					seen[m.TransactionID]++
				}
				mu.Unlock()
				b.ackBatch(t, r.Messages, "completed", "")
			}
		})
	}
	wg.Wait()
	// Stragglers: whatever is left is drained by one consumer.
	for {
		r := b1.pop(t, "shared", "", url.Values{"batch": {"100"}})
		if len(r.Messages) == 0 {
			break
		}
		for _, m := range r.Messages {
			seen[m.TransactionID]++
		}
		b1.ackBatch(t, r.Messages, "completed", "")
	}
	require.Len(t, seen, 4*perPartition)
	for id, n := range seen {
		require.Equal(t, 1, n, "%s delivered %d times", id, n)
	}
}

func TestDelayedProcessingAndWindowBuffer(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "delayed", map[string]any{"delayedProcessing": 1})
	pushN(t, b, "delayed", "Default", 0, 1)
	require.Empty(t, b.pop(t, "delayed", "", nil).Messages, "invisible until createdAt + 1s")
	checkFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if len(b.pop(t, "delayed", "", nil).Messages) != 1 {
			return errNotYet
		}
		return nil
	})

	b.configure(t, "buffered", map[string]any{"windowBuffer": 3600})
	pushN(t, b, "buffered", "Default", 0, 2)
	require.Empty(t, b.pop(t, "buffered", "", nil).Messages, "not served while the newest message is younger than windowBuffer")
	// Two hours pass: every stored time moves back, the wait in the ready line too.
	d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '2 hours'`)
	d.exec(t, `UPDATE queen.consumers SET avail_at = avail_at - interval '2 hours'`)
	require.Len(t, b.pop(t, "buffered", "", url.Values{"batch": {"5"}}).Messages, 2)
}

func TestConsumerGroupAdmin(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	pushN(t, b, "adm", "Default", 0, 4)
	g := url.Values{"consumerGroup": {"g"}, "batch": {"2"}}
	r := b.pop(t, "adm", "", g)
	b.ackBatch(t, r.Messages, "completed", "g")

	// Seek to the end: nothing left for g.
	code, body := do(t, "POST", b.URL+"/api/v1/consumer-groups/g/queues/adm/seek", map[string]any{"toEnd": true})
	require.Equal(t, http.StatusOK, code, "%s", body)
	require.Empty(t, b.pop(t, "adm", "", g).Messages)
	code, _ = do(t, "POST", b.URL+"/api/v1/consumer-groups/g/queues/adm/seek", map[string]any{})
	require.Equal(t, http.StatusBadRequest, code)
	// Seek to a time before everything: all four again.
	code, _ = do(t, "POST", b.URL+"/api/v1/consumer-groups/g/queues/adm/seek",
		map[string]any{"timestamp": time.Now().Add(-time.Hour).Format(time.RFC3339)})
	require.Equal(t, http.StatusOK, code)
	require.Len(t, b.pop(t, "adm", "", url.Values{"consumerGroup": {"g"}, "batch": {"10"}}).Messages, 4)

	// Deleting the group forgets its cursors: it starts over.
	code, body = do(t, "DELETE", b.URL+"/api/v1/consumer-groups/g", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, string(body), `"deletedPartitions":1`)
	require.Len(t, b.pop(t, "adm", "", url.Values{"consumerGroup": {"g"}, "batch": {"10"}}).Messages, 4)
}

func TestRetentionRemovesConsumedSegments(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "done", map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 60})
	pushN(t, b, "done", "Default", 0, 1)
	pushN(t, b, "done", "Default", 1, 1)
	r := b.pop(t, "done", "", nil) // consumes offset 0 only
	b.ack(t, r.Messages[0], "completed", "")
	d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '2 minutes'`)
	st := sqlstoretest.OpenSchema(t, b.Schema)
	stats, err := st.RetainOnce(context.Background(), 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), stats.Segments, "only the consumed segment goes")
	require.Equal(t, int64(1), d.int(t, `SELECT first_offset FROM queen.segments`))
	require.Equal(t, "done-Default-1", b.pop(t, "done", "", nil).Messages[0].TransactionID)
}

// TestRetentionRemovesOnlyAnExpiredPrefix: created_at is the pushing
// transaction's start, so a push that waited for the partition lock can sit
// at a later offset with an earlier created_at than the segment before it.
// Retention must stop at the first segment it keeps (a soak found it
// deleting the expired ones behind it too: a hole in the log, messages
// never delivered). Each of the three purges is checked.
func TestRetentionRemovesOnlyAnExpiredPrefix(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "pre", map[string]any{"retentionEnabled": true, "retentionSeconds": 60})
	b.configure(t, "pre-done", map[string]any{"retentionEnabled": true, "completedRetentionSeconds": 60})
	for _, q := range []string{"pre", "pre-done"} {
		for i := range 4 {
			pushN(t, b, q, "Default", i, 1)
		}
	}
	// Everything consumed on pre-done (so only created_at holds segments back).
	for range 4 {
		r := b.pop(t, "pre-done", "", nil)
		require.Len(t, r.Messages, 1)
		b.ack(t, r.Messages[0], "completed", "")
	}
	// Offsets 0, 1 and 3 expired; offset 2 (and its hashes) not.
	d.exec(t, `SELECT queen.sidecar_ensure(now() - interval '3 hours', now(), interval '1 hour')`)
	d.exec(t, `UPDATE queen.segments SET created_at = now() - interval '2 hours' WHERE first_offset <> 2`)
	d.exec(t, `UPDATE queen.log_txns SET created_at = now() - interval '2 hours' WHERE first_offset <> 2`)
	st := sqlstoretest.OpenSchema(t, b.Schema)
	stats, err := st.RetainOnce(context.Background(), 100)
	require.NoError(t, err)
	require.Equal(t, int64(4), stats.Segments, "offsets 0 and 1 of each queue")
	for _, q := range []string{"pre", "pre-done"} {
		require.Equal(t, int64(2), d.int(t, `SELECT count(*) FROM queen.segments s JOIN queen.partitions p ON p.id = s.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 AND s.first_offset IN (2, 3)`, q), q)
		// The sidecar is trimmed by time, a child at a time: every row of
		// the expired hour goes, offset 3's too (a hash row older than every
		// window serves no verdict).
		require.Equal(t, []int64{2}, d.int64s(t, `SELECT l.first_offset FROM queen.log_txns l JOIN queen.partitions p ON p.id = l.partition_id
			JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY 1`, q), q)
	}
	// The log has no hole: a consumer of pre reads offsets 2 and 3.
	r := b.pop(t, "pre", "", url.Values{"batch": {"10"}})
	require.Len(t, r.Messages, 2)
	require.Equal(t, "pre-Default-2", r.Messages[0].TransactionID)
	require.Equal(t, "pre-Default-3", r.Messages[1].TransactionID)
}

// TestNewGroupFirstPopRacingAnother: the first pop of a new consumer group
// inserts its consumer_groups row; a second first pop, whose insert waited
// on that row until it committed, found nothing in its statement's snapshot
// and answered 500 (seen in a soak). An outside session plays the first pop:
// it inserts the row and commits only once the broker's pop waits on it.
func TestNewGroupFirstPopRacingAnother(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	pushN(t, b, "race", "Default", 0, 1)
	ctx := context.Background()
	conn, err := d.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, d.q(`INSERT INTO queen.consumer_groups (queue_id, consumer_group)
		SELECT id, 'g-race' FROM queen.queues WHERE name = 'race'`))
	require.NoError(t, err)

	type answer struct {
		status int
		body   string
		err    error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Get(b.URL + "/api/v1/pop/queue/race?consumerGroup=g-race")
		if err != nil {
			done <- answer{err: err}
			return
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{status: resp.StatusCode, body: string(body), err: err}
	}()
	// The pop's insert waits on the uncommitted row.
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if d.int(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND (query LIKE '%consumer_groups%' OR query LIKE '%pop_prepare%') AND pid <> pg_backend_pid()`) == 0 {
			return errNotYet
		}
		return nil
	})
	require.NoError(t, tx.Commit(ctx))
	a := <-done
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Contains(t, a.body, `"transactionId":"race-Default-0"`)
}

// TestGroupCatchUpLocksInPartitionOrder: every pop of a group brings the
// group's cursor rows up to date (pop_prepare's catch-up); two catch-ups
// that locked the same rows in different orders deadlocked, and a soak's
// consumers stalled on the errors. The catch-up locks in partition-id order:
// while it waits on the first row, it holds none of the others.
func TestGroupCatchUpLocksInPartitionOrder(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	const parts = 20
	for i := range parts {
		pushN(t, b, "order", fmt.Sprintf("p%02d", i), 0, 1)
	}
	// The group's first pop makes its cursor rows; new pushes then leave
	// every row behind its partition's end.
	b.pop(t, "order", "", url.Values{"consumerGroup": {"g"}})
	for i := range parts {
		pushN(t, b, "order", fmt.Sprintf("p%02d", i), 1, 1)
	}
	require.EqualValues(t, parts, d.int(t, `SELECT count(*) FROM queen.consumers WHERE consumer_group = 'g'`))

	ctx := context.Background()
	holder, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	var first string
	require.NoError(t, holder.QueryRow(ctx, d.q(`SELECT partition_id::text FROM queen.consumers
		WHERE consumer_group = 'g' ORDER BY partition_id LIMIT 1 FOR UPDATE`)).Scan(&first))

	done := make(chan int, 1)
	go func() {
		resp, err := http.Get(b.URL + "/api/v1/pop/queue/order?consumerGroup=g")
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if d.int(t, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE '%pop_prepare%' AND pid <> pg_backend_pid()`) == 0 {
			return errNotYet
		}
		return nil
	})
	// The catch-up waits on the first row and has locked no other.
	probe, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	var free int
	err = probe.QueryRow(ctx, d.q(`SELECT count(*) FROM (SELECT 1 FROM queen.consumers
		WHERE consumer_group = 'g' AND partition_id <> $1::uuid FOR UPDATE NOWAIT) x`), first).Scan(&free)
	_ = probe.Rollback(ctx)
	require.NoError(t, err, "a row after the first is locked by the waiting catch-up")
	require.Equal(t, parts-1, free)

	require.NoError(t, holder.Commit(ctx))
	require.Equal(t, http.StatusOK, <-done)
}

// TestSidecarFloorIsASetting: RETENTION_SIDECAR_MIN_SECONDS lowers the
// floor under which the hash sidecar is never trimmed (900 s by default),
// and RETENTION_SIDECAR_CHILD_SECONDS sets the time slice retention drops
// whole: with a floor and slices of a minute and only a 60 s window, hashes
// five minutes old are gone within a few passes.
func TestSidecarFloorIsASetting(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", func(c *Config) {
		c.RetentionInterval = 50 * time.Millisecond
		c.RetentionSidecarMinSeconds = 60
		c.RetentionSidecarChildSeconds = 60
	})
	d := newDB(t, b.Schema)
	b.configure(t, "short", map[string]any{"dedupWindowSeconds": 60})
	pushN(t, b, "short", "Default", 0, 1)
	d.exec(t, `SELECT queen.sidecar_ensure(now() - interval '10 minutes', now(), interval '1 minute')`)
	d.exec(t, `UPDATE queen.log_txns SET created_at = now() - interval '5 minutes'`)
	// Every child that ended more than a minute (the horizon) ago goes,
	// the one holding the row with them.
	checkFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		if _, _, rows, _, _ := d.partitionStats(t, "short", "Default"); rows != 0 ||
			d.int(t, `SELECT count(*) FROM queen.sidecar_children() WHERE hi <= now() - interval '2 minutes'`) != 0 {
			return errNotYet
		}
		return nil
	})
}

func TestReplayOutOfTheDLQIsNotSwallowedByDedup(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	orig := b.push(t, item{"queue": "rp", "transactionId": "order:7", "payload": map[string]any{"n": 7}})
	r := b.pop(t, "rp", "", nil)
	require.True(t, b.ack(t, r.Messages[0], "dlq", "").DLQ)
	require.Empty(t, b.pop(t, "rp", "", nil).Messages)

	code, body := do(t, "POST", b.URL+"/api/v1/messages/"+r.Messages[0].PartitionID+"/order:7/retry", nil)
	require.Equal(t, http.StatusOK, code, "%s", body)
	var rep struct {
		Success  bool `json:"success"`
		Replayed []struct {
			MessageID string `json:"messageId"`
		} `json:"replayed"`
	}
	require.NoError(t, json.Unmarshal(body, &rep))
	require.True(t, rep.Success)
	require.Len(t, rep.Replayed, 1)

	again := b.pop(t, "rp", "", nil)
	require.Len(t, again.Messages, 1, "the replay is delivered, not swallowed as a duplicate")
	require.Equal(t, "order:7", again.Messages[0].TransactionID)
	require.JSONEq(t, `{"n":7}`, string(again.Messages[0].Data))
	require.Equal(t, rep.Replayed[0].MessageID, again.Messages[0].ID)
	require.True(t, b.ack(t, again.Messages[0], "completed", "").Success)

	// The DLQ is empty now; a second replay finds nothing.
	_, body = do(t, "GET", b.URL+"/api/v1/dlq?queue=rp", nil)
	require.Contains(t, string(body), `"total":0`)
	code, _ = do(t, "POST", b.URL+"/api/v1/messages/"+r.Messages[0].PartitionID+"/order:7/retry", nil)
	require.Equal(t, http.StatusNotFound, code)
	// A producer retry of the original is still a duplicate naming it.
	dup := b.push(t, item{"queue": "rp", "transactionId": "order:7"})
	require.Equal(t, "duplicate", dup[0].Status)
	require.Equal(t, orig[0].MessageID, dup[0].MessageID)
}

func TestAutoAckConsumesWithoutALease(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	pushN(t, b, "auto", "Default", 0, 3)
	r := b.pop(t, "auto", "", url.Values{"batch": {"2"}, "autoAck": {"true"}})
	require.Len(t, r.Messages, 2)
	require.Empty(t, r.LeaseID, "autoAck pops carry no lease")
	require.Empty(t, r.Messages[0].LeaseID)
	// Nothing is held: the next pop goes straight on, and the first two are
	// never delivered again.
	r2 := b.pop(t, "auto", "", url.Values{"batch": {"10"}, "autoAck": {"1"}})
	require.Len(t, r2.Messages, 1)
	require.Equal(t, "auto-Default-2", r2.Messages[0].TransactionID)
	require.Empty(t, b.pop(t, "auto", "", nil).Messages)
}

// TestMaxWaitTimeEviction: an eviction pass deletes the messages of a queue
// with maxWaitTimeSeconds stored longer ago than that (not moved to the
// DLQ), with their trace events; a fresh message stays, and a queue without
// the option is untouched. The pass is driven directly.
func TestMaxWaitTimeEviction(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	b.configure(t, "waity", map[string]any{"maxWaitTimeSeconds": 60})
	old := b.push(t, item{"queue": "waity", "transactionId": "old-1", "payload": 1})
	b.push(t, item{"queue": "waity", "transactionId": "old-2", "payload": 2})
	b.push(t, item{"queue": "plain", "transactionId": "old-3", "payload": 3})
	status, tr := b.trace(t, map[string]any{"transactionId": "old-1", "partitionId": *old[0].PartitionID,
		"data": map[string]any{"text": "seen"}})
	require.Equal(t, http.StatusCreated, status, "%v", tr)
	d.exec(t, `UPDATE queen.segments s SET created_at = s.created_at - interval '2 minutes'
		FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
		WHERE s.partition_id = p.id AND q.name IN ('waity', 'plain')`)
	b.push(t, item{"queue": "waity", "transactionId": "fresh", "payload": 4})

	st, err := sqlstoretest.OpenSchema(t, b.Schema).EvictOnce(context.Background(), 1000)
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Messages)

	r := b.pop(t, "waity", "", url.Values{"batch": {"10"}})
	require.Len(t, r.Messages, 1)
	require.Equal(t, "fresh", r.Messages[0].TransactionID)
	r = b.pop(t, "plain", "", url.Values{"batch": {"10"}})
	require.Len(t, r.Messages, 1)
	require.Equal(t, "old-3", r.Messages[0].TransactionID)
	// Gone, not dead-lettered; their trace events went with them.
	code, _ := do(t, "GET", b.URL+"/api/v1/messages/"+*old[0].PartitionID+"/old-1", nil)
	require.Equal(t, http.StatusNotFound, code)
	_, body := do(t, "GET", b.URL+"/api/v1/dlq?queue=waity", nil)
	require.Contains(t, string(body), `"total":0`)
	_, body = do(t, "GET", b.URL+"/api/v1/traces/"+*old[0].PartitionID+"/old-1", nil)
	require.JSONEq(t, `{"traces":[]}`, string(body))
	// A second pass finds nothing more.
	st, err = sqlstoretest.OpenSchema(t, b.Schema).EvictOnce(context.Background(), 1000)
	require.NoError(t, err)
	require.Zero(t, st.Messages)
}
