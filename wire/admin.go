package wire

import (
	"runtime"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/partition"
)

// handleMetrics serves GET /metrics, the JSON summary Queen clients read.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	st := s.metrics.Snapshot()
	ps := &st.Pool
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"uptime":   int64(time.Since(s.started).Seconds()),
		"requests": map[string]any{"total": 0, "rate": 0},
		"messages": map[string]any{"queued": st.Queued, "duplicates": st.Duplicates, "batches": st.Batches,
			"mailboxFull": st.MailboxFull, "pushFailures": st.PushFailures},
		"actors":       st.Actors,
		"mailboxDepth": st.MailboxDepth,
		"database":     map[string]any{"poolSize": ps.Total, "idleConnections": ps.Idle, "waitingRequests": 0},
		"memory":       map[string]any{"heapAlloc": ms.HeapAlloc, "sys": ms.Sys},
		"cpu":          map[string]any{"goroutines": runtime.NumGoroutine()},
		"dedupCache":   dedupCacheMetrics(&st),
	})
}

// dedupCacheMetrics is the dedup cache's part of /metrics: watermark hits
// (and the batch hashes they found), the sentinels (full-window probes) by
// reason, what the cache holds, and its background loads.
func dedupCacheMetrics(st *metrics.Snapshot) map[string]any {
	c, h := &st.Cache, st.Cache.Hydrations
	return map[string]any{
		"hits": c.Hits, "found": c.Found,
		"sentinels": c.Sentinels, "sentinelsByReason": c.SentinelsByReason,
		"bytes": c.Bytes, "partitions": c.Partitions, "hashes": c.Hashes,
		"hydrating": c.Hydrating, "tombstones": c.Tombstones, "tooBig": c.TooBig, "evictions": c.Evictions,
		"hydrations": map[string]any{"started": h["started"], "finished": h["finished"], "failed": h["failed"],
			"aborted": h["aborted"], "truncated": h["truncated"], "busy": h["busy"], "tooDeep": h["too_deep"],
			"running": c.HydrationsRunning},
	}
}

type queueView struct {
	ID         string                 `json:"id"`
	Name       string                 `json:"name"`
	Namespace  string                 `json:"namespace"`
	Task       string                 `json:"task"`
	CreatedAt  string                 `json:"createdAt"`
	Partitions int                    `json:"partitions"`
	Messages   messageCounts          `json:"messages"`
	Options    partition.QueueOptions `json:"options"`
}

type messageCounts struct {
	Total      int64 `json:"total"`
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
}

// handleListQueues serves GET /api/v1/resources/queues.
func (s *Server) handleListQueues(ctx *fasthttp.RequestCtx) {
	qs, err := s.b.Admin.ListQueues(ctx)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]queueView, 0, len(qs))
	for _, q := range qs {
		out = append(out, queueView{ID: q.ID.String(), Name: q.Name, Namespace: q.Namespace, Task: q.Task,
			CreatedAt: timeMillis(q.CreatedAt), Partitions: q.Partitions,
			Messages: messageCounts{Total: q.Messages, Pending: q.Messages}, Options: q.Options})
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"queues": out})
}

// handleDeleteQueue serves DELETE /api/v1/resources/queues/:queue.
func (s *Server) handleDeleteQueue(ctx *fasthttp.RequestCtx, name string) {
	existed, err := s.b.QueueDeleter.DeleteQueue(ctx, name)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"deleted": true, "queue": name, "existed": existed})
}
