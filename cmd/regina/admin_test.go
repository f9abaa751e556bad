package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type statsView struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	Completed  int64 `json:"completed"`
	Failed     int64 `json:"failed"`
	DeadLetter int64 `json:"deadLetter"`
}

type adminConsumer struct {
	ConsumerGroup   string  `json:"consumerGroup"`
	CursorOffset    int64   `json:"cursorOffset"`
	Pending         int64   `json:"pending"`
	Processing      int64   `json:"processing"`
	LagSeconds      float64 `json:"lagSeconds"`
	OldestPendingAt *string `json:"oldestPendingAt"`
	LeaseID         *string `json:"leaseId"`
	LeaseExpiresAt  *string `json:"leaseExpiresAt"`
}

type adminPartition struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	NextOffset    int64           `json:"nextOffset"`
	OldestOffset  int64           `json:"oldestOffset"`
	Stats         statsView       `json:"stats"`
	OldestMessage *string         `json:"oldestMessage"`
	NewestMessage *string         `json:"newestMessage"`
	Consumers     []adminConsumer `json:"consumers"`
}

type adminGroup struct {
	ConsumerGroup string  `json:"consumerGroup"`
	Partitions    int     `json:"partitions"`
	Pending       int64   `json:"pending"`
	Processing    int64   `json:"processing"`
	LagSeconds    float64 `json:"lagSeconds"`
}

type adminQueue struct {
	ID                 string            `json:"id"`
	Name               string            `json:"name"`
	Namespace          string            `json:"namespace"`
	Task               string            `json:"task"`
	DedupWindowSeconds int               `json:"dedupWindowSeconds"`
	PartitionCount     int               `json:"partitionCount"`
	Partitions         *[]adminPartition `json:"partitions"`
	Totals             statsView         `json:"totals"`
	Messages           statsView         `json:"messages"`
	ConsumerGroups     []adminGroup      `json:"consumerGroups"`
}

type adminMessage struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	QueuePath     string          `json:"queuePath"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	Namespace     string          `json:"namespace"`
	Task          string          `json:"task"`
	Status        string          `json:"status"`
	Offset        int64           `json:"offset"`
	Data          json.RawMessage `json:"data"`
	CreatedAt     string          `json:"createdAt"`
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	status, body := do(t, "GET", u, nil)
	require.Equal(t, http.StatusOK, status, "%s: %s", u, body)
	require.NoError(t, json.Unmarshal(body, v), "%s", body)
}

// The section-9 admin views, against a known state: offsets, pending,
// leases, a named group, a dead letter and an aged backlog.
//
//nolint:tparallel // the subtests read one state in order
func TestAdminViews(t *testing.T) {
	t.Parallel()
	b := startBroker(t, "", nil)
	d := newDB(t, b.Schema)
	const q = "shop.orders.eu"
	sent := b.push(t, item{"queue": q, "partition": "a", "transactionId": "t1", "payload": map[string]any{"n": 1}},
		item{"queue": q, "partition": "a", "transactionId": "t2", "payload": map[string]any{"n": 2}},
		item{"queue": q, "partition": "a", "transactionId": "t3", "payload": map[string]any{"n": 3}})
	b.push(t, item{"queue": q, "partition": "b", "transactionId": "u1"})
	b.push(t, item{"queue": "billing.invoices", "transactionId": "i1"}) // namespace billing, task invoices

	// Queue mode: two of a leased, the first acked; b's only message to the DLQ.
	r := b.pop(t, q, "a", url.Values{"batch": {"2"}})
	require.Len(t, r.Messages, 2)
	require.True(t, b.ack(t, r.Messages[0], "completed", "").Success)
	rb := b.pop(t, q, "b", nil)
	require.True(t, b.ack(t, rb.Messages[0], "dlq", "").DLQ)
	// A named group consumes all of a.
	b.pop(t, q, "a", url.Values{"batch": {"10"}, "consumerGroup": {"audit"}, "autoAck": {"true"}})
	// a's backlog is 100 s old.
	d.exec(t, `UPDATE queen.segments SET created_at = created_at - interval '100 seconds'
		WHERE partition_id = $1`, *sent[0].PartitionID)

	t.Run("queue detail", func(t *testing.T) {
		var v adminQueue
		getJSON(t, b.URL+"/api/v1/resources/queues/"+url.PathEscape(q), &v)
		require.Equal(t, q, v.Name)
		require.Equal(t, "shop", v.Namespace)
		require.Equal(t, "orders", v.Task)
		require.Equal(t, 3600, v.DedupWindowSeconds)
		require.Equal(t, 2, v.PartitionCount)
		require.NotNil(t, v.Partitions)
		ps := *v.Partitions
		require.Len(t, ps, 2)
		a, pb := ps[0], ps[1]
		require.Equal(t, "a", a.Name)
		require.Equal(t, *sent[0].PartitionID, a.ID)
		require.EqualValues(t, 3, a.NextOffset)
		require.EqualValues(t, 0, a.OldestOffset)
		require.Equal(t, statsView{Total: 3, Pending: 2, Processing: 1, Completed: 1}, a.Stats)
		require.NotNil(t, a.OldestMessage)
		require.NotNil(t, a.NewestMessage)
		require.Len(t, a.Consumers, 2)
		qm, audit := a.Consumers[0], a.Consumers[1]
		require.Equal(t, "__QUEUE_MODE__", qm.ConsumerGroup)
		require.EqualValues(t, 1, qm.CursorOffset)
		require.EqualValues(t, 2, qm.Pending, "next_offset - cursor_offset")
		require.EqualValues(t, 1, qm.Processing)
		require.Equal(t, r.LeaseID, *qm.LeaseID)
		require.NotNil(t, qm.LeaseExpiresAt)
		require.GreaterOrEqual(t, qm.LagSeconds, 100.0)
		require.Less(t, qm.LagSeconds, 200.0)
		require.NotNil(t, qm.OldestPendingAt)
		require.Equal(t, "audit", audit.ConsumerGroup)
		require.EqualValues(t, 3, audit.CursorOffset)
		require.EqualValues(t, 0, audit.Pending)
		require.Equal(t, 0.0, audit.LagSeconds)
		require.Nil(t, audit.OldestPendingAt)
		require.Nil(t, audit.LeaseID)

		require.Equal(t, "b", pb.Name)
		require.Equal(t, statsView{Total: 1, Completed: 1, Failed: 1, DeadLetter: 1}, pb.Stats)

		require.Equal(t, statsView{Total: 4, Pending: 2, Processing: 1, Completed: 2, Failed: 1, DeadLetter: 1}, v.Totals)
		require.Equal(t, statsView{Total: 4, Pending: 2, Processing: 1, Completed: 2}, v.Messages,
			"the short form of the list view")
		require.Equal(t, []string{"__QUEUE_MODE__", "audit"}, []string{v.ConsumerGroups[0].ConsumerGroup, v.ConsumerGroups[1].ConsumerGroup})
		require.Equal(t, 2, v.ConsumerGroups[0].Partitions)
		require.EqualValues(t, 2, v.ConsumerGroups[0].Pending)
		require.GreaterOrEqual(t, v.ConsumerGroups[0].LagSeconds, 100.0)
		require.Equal(t, 1, v.ConsumerGroups[1].Partitions)

		status, body := do(t, "GET", b.URL+"/api/v1/resources/queues/nope", nil)
		require.Equal(t, http.StatusNotFound, status)
		require.JSONEq(t, `{"error":"Queue not found"}`, string(body))
	})

	t.Run("overview, namespaces, tasks", func(t *testing.T) {
		var o struct {
			Queues, Partitions, Namespaces, Tasks, ConsumerGroups int
			Messages                                              statsView
			Timestamp                                             string
		}
		getJSON(t, b.URL+"/api/v1/resources/overview", &o)
		require.Equal(t, 2, o.Queues)
		require.Equal(t, 3, o.Partitions)
		require.Equal(t, 2, o.Namespaces)
		require.Equal(t, 2, o.Tasks)
		require.Equal(t, 2, o.ConsumerGroups)
		// Pending leaves the leased (processing) messages out, as Queen's
		// overview does.
		require.Equal(t, statsView{Total: 5, Pending: 2, Processing: 1, Completed: 2, Failed: 1, DeadLetter: 1}, o.Messages)
		require.NotEmpty(t, o.Timestamp)

		type grouping struct {
			Namespace  string    `json:"namespace"`
			Task       string    `json:"task"`
			Queues     []string  `json:"queues"`
			Partitions int       `json:"partitions"`
			Messages   statsView `json:"messages"`
		}
		var ns struct {
			Namespaces []grouping `json:"namespaces"`
		}
		getJSON(t, b.URL+"/api/v1/resources/namespaces", &ns)
		require.Len(t, ns.Namespaces, 2)
		require.Equal(t, "billing", ns.Namespaces[0].Namespace)
		require.Equal(t, []string{"billing.invoices"}, ns.Namespaces[0].Queues)
		require.EqualValues(t, 1, ns.Namespaces[0].Messages.Total)
		require.Equal(t, "shop", ns.Namespaces[1].Namespace)
		require.Equal(t, 2, ns.Namespaces[1].Partitions)
		var ts struct {
			Tasks []grouping `json:"tasks"`
		}
		getJSON(t, b.URL+"/api/v1/resources/tasks", &ts)
		require.Len(t, ts.Tasks, 2)
		require.Equal(t, "invoices", ts.Tasks[0].Task)
		require.Equal(t, "orders", ts.Tasks[1].Task)
		require.EqualValues(t, 4, ts.Tasks[1].Messages.Total)
	})

	t.Run("messages list and by transaction id", func(t *testing.T) {
		type page struct {
			Messages   []adminMessage `json:"messages"`
			Total      int64          `json:"total"`
			Pagination struct {
				Limit, Offset int
				Total         int64
			} `json:"pagination"`
		}
		var p page
		getJSON(t, b.URL+"/api/v1/messages?queue="+url.QueryEscape(q), &p)
		require.EqualValues(t, 4, p.Total)
		require.Len(t, p.Messages, 4)
		// Newest first: b's message, then a's from the highest offset.
		var got []string
		for _, m := range p.Messages {
			got = append(got, m.Partition+"/"+m.TransactionID+"/"+m.Status)
		}
		// u1 was dead-lettered: the list says so, as the detail does.
		require.Equal(t, []string{"b/u1/dead_letter", "a/t3/pending", "a/t2/processing", "a/t1/completed"}, got)
		m := p.Messages[2]
		require.Equal(t, sent[1].MessageID, m.ID)
		require.Equal(t, q, m.Queue)
		require.Equal(t, "shop", m.Namespace)
		require.Equal(t, "orders", m.Task)
		require.Equal(t, q+"/a", m.QueuePath)
		require.EqualValues(t, 1, m.Offset)
		require.JSONEq(t, `{"n":2}`, string(m.Data))

		getJSON(t, b.URL+"/api/v1/messages?queue="+url.QueryEscape(q)+"&limit=2&offset=1", &p)
		require.EqualValues(t, 4, p.Total)
		require.Equal(t, 2, p.Pagination.Limit)
		require.Equal(t, 1, p.Pagination.Offset)
		require.Equal(t, []string{"t3", "t2"}, []string{p.Messages[0].TransactionID, p.Messages[1].TransactionID})
		getJSON(t, b.URL+"/api/v1/messages?queue="+url.QueryEscape(q)+"&partition=a&offset=2", &p)
		require.EqualValues(t, 3, p.Total)
		require.Len(t, p.Messages, 1)
		require.Equal(t, "t1", p.Messages[0].TransactionID)
		getJSON(t, b.URL+"/api/v1/messages?ns=billing", &p)
		require.EqualValues(t, 1, p.Total)
		require.Equal(t, "i1", p.Messages[0].TransactionID)
		getJSON(t, b.URL+"/api/v1/messages?from="+url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339)), &p)
		require.EqualValues(t, 0, p.Total)
		require.Empty(t, p.Messages)
		status, _ := do(t, "GET", b.URL+"/api/v1/messages?from=yesterday", nil)
		require.Equal(t, http.StatusBadRequest, status)

		var one adminMessage
		getJSON(t, b.URL+"/api/v1/messages/"+*sent[0].PartitionID+"/t2", &one)
		require.Equal(t, sent[1].MessageID, one.ID)
		require.Equal(t, "processing", one.Status)
		require.Equal(t, "a", one.Partition)
		require.JSONEq(t, `{"n":2}`, string(one.Data))
		status, body := do(t, "GET", b.URL+"/api/v1/messages/"+*sent[0].PartitionID+"/nope", nil)
		require.Equal(t, http.StatusNotFound, status)
		require.JSONEq(t, `{"error":"Message not found"}`, string(body))
		status, _ = do(t, "GET", b.URL+"/api/v1/messages/not-a-uuid/t2", nil)
		require.Equal(t, http.StatusBadRequest, status)
		status, _ = do(t, "PUT", b.URL+"/api/v1/messages/"+*sent[0].PartitionID+"/t2", nil)
		require.Equal(t, http.StatusMethodNotAllowed, status)
	})

	t.Run("status views", func(t *testing.T) {
		var s struct {
			Server   string `json:"server"`
			Queues   int    `json:"queueCount"`
			Database struct {
				Status string `json:"status"`
				Pool   struct {
					Max int `json:"max"`
				} `json:"pool"`
			} `json:"database"`
			Broker struct {
				Queued int `json:"queued"`
			} `json:"broker"`
			Messages statsView `json:"messages"`
		}
		getJSON(t, b.URL+"/api/v1/status", &s)
		require.Equal(t, "Regina", s.Server)
		require.Equal(t, 2, s.Queues)
		require.Equal(t, "connected", s.Database.Status)
		require.Equal(t, 6, s.Database.Pool.Max)
		require.Equal(t, 5, s.Broker.Queued)
		require.EqualValues(t, 5, s.Messages.Total)
		getJSON(t, b.URL+"/api/v1/status?namespace=shop", &s)
		require.Equal(t, 1, s.Queues)
		require.EqualValues(t, 4, s.Messages.Total)

		var l struct {
			Queues     []adminQueue `json:"queues"`
			Pagination struct {
				Limit, Offset, Total int
			} `json:"pagination"`
		}
		getJSON(t, b.URL+"/api/v1/status/queues", &l)
		require.Equal(t, 2, l.Pagination.Total)
		require.Equal(t, "billing.invoices", l.Queues[0].Name)
		require.Equal(t, q, l.Queues[1].Name)
		require.Nil(t, l.Queues[1].Partitions, "the list leaves partitions out")
		require.Equal(t, 2, l.Queues[1].PartitionCount)
		require.EqualValues(t, 4, l.Queues[1].Totals.Total)
		getJSON(t, b.URL+"/api/v1/status/queues?limit=1&offset=1", &l)
		require.Len(t, l.Queues, 1)
		require.Equal(t, q, l.Queues[0].Name)

		var one struct {
			Queue      adminQueue       `json:"queue"`
			Partitions []adminPartition `json:"partitions"`
			Totals     statsView        `json:"totals"`
		}
		getJSON(t, b.URL+"/api/v1/status/queues/"+url.PathEscape(q), &one)
		require.Equal(t, q, one.Queue.Name)
		require.Len(t, one.Partitions, 2)
		require.EqualValues(t, 4, one.Totals.Total)
		status, _ := do(t, "GET", b.URL+"/api/v1/status/queues/nope", nil)
		require.Equal(t, http.StatusNotFound, status)
	})

	t.Run("the retry route is kept", func(t *testing.T) {
		status, body := do(t, "POST", b.URL+"/api/v1/messages/"+rb.Messages[0].PartitionID+"/u1/retry", nil)
		require.Equal(t, http.StatusOK, status, "%s", body)
		_, _, _, _, next := d.partitionStats(t, q, "b")
		require.EqualValues(t, 2, next)
	})
}
