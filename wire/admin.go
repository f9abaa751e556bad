package wire

import (
	"runtime"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// handleMetrics serves GET /metrics, Queen's JSON summary with this
// broker's figures: uptime in seconds; requests served since start and per
// second over the last minute; messages queued by pushes and transactions
// (duplicates excluded) since start and per second over the last minute;
// the connection pool (waitingRequests is null: pgxpool does not count the
// acquires waiting now; emptyAcquires counts those that had to wait, since
// start); memory in bytes (external and arrayBuffers are JavaScript's and
// null); CPU seconds used. Regina's own figures follow under their own keys.
func (s *Server) handleMetrics(ctx *fasthttp.RequestCtx) {
	st := s.metrics.Snapshot()
	ps := &st.Pool
	now := time.Now()
	reqs, reqRate := s.stats.requests.read(now)
	msgs, msgRate := s.stats.pushed.read(now)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var rss any
	if n, ok := readRSS(); ok {
		rss = n
	}
	var cpu map[string]any
	if user, sys, ok := cpuTimes(); ok {
		cpu = map[string]any{"user": user.Seconds(), "system": sys.Seconds()}
	} else {
		cpu = map[string]any{"user": nil, "system": nil}
	}
	cpu["goroutines"] = runtime.NumGoroutine()
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"uptime":   int64(now.Sub(s.started).Seconds()),
		"requests": map[string]any{"total": reqs, "rate": reqRate},
		"messages": map[string]any{"total": msgs, "rate": msgRate, "queued": st.Queued,
			"duplicates": st.Duplicates, "batches": st.Batches, "mailboxFull": st.MailboxFull,
			"pushFailures": st.PushFailures, "withdrawn": st.Withdrawn, "abandoned": st.Abandoned},
		"actors":       st.Actors,
		"mailboxDepth": st.MailboxDepth,
		"database": map[string]any{"poolSize": ps.Total, "idleConnections": ps.Idle,
			"activeConnections": ps.Acquired, "maxConnections": ps.Max, "waitingRequests": nil, "emptyAcquires": ps.EmptyAcquires},
		"memory": map[string]any{"rss": rss, "heapTotal": ms.HeapSys, "heapUsed": ms.HeapAlloc,
			"external": nil, "arrayBuffers": nil, "heapAlloc": ms.HeapAlloc, "sys": ms.Sys},
		"cpu":        cpu,
		"dedupCache": dedupCacheMetrics(&st),
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
		"filterHashes": c.FilterHashes, "filterBytes": c.FilterBytes, "filterHits": c.ColdHits,
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
	Completed  int64 `json:"completed"`
}

// handleListQueues serves GET /api/v1/resources/queues: every queue, by
// name, with queue mode's counts (pending excludes the leased messages,
// which are processing, as Queen counts it).
func (s *Server) handleListQueues(ctx *fasthttp.RequestCtx) {
	qs, now, err := s.b.Admin.QueueDetails(ctx, reginatype.QueueFilter{})
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]queueView, 0, len(qs))
	for i := range qs {
		q := &qs[i]
		t := aggregate(q, now).totals
		out = append(out, queueView{ID: q.ID.String(), Name: q.Name, Namespace: q.Namespace, Task: q.Task,
			CreatedAt: timeMillis(q.CreatedAt), Partitions: len(q.Partitions),
			Messages: messageCounts{Total: t.Total, Pending: max(t.Pending-t.Processing, 0), Processing: t.Processing,
				Completed: t.Completed}, Options: q.Options})
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
