package wire

import (
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/reginatype"
)

// Routes Queen's web dashboard (and server/API.md) calls that Regina answers
// without a counterpart of its own: each says honestly what there is.

// handleQueueMessages serves GET /api/v1/status/queues/:queue/messages
// (limit (50), offset): a bare array of the queue's stored messages, newest
// first, with their queue-mode status.
func (s *Server) handleQueueMessages(ctx *fasthttp.RequestCtx, queue string) {
	args := ctx.QueryArgs()
	f := reginatype.MessageFilter{Queue: queue, Limit: min(max(queryInt(args, "limit", 50), 1), 1000),
		Offset: max(queryInt(args, "offset", 0), 0)}
	list, _, err := s.b.Admin.ListMessages(ctx, f)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]map[string]any, len(list))
	for i := range list {
		m := &list[i]
		out[i] = map[string]any{"id": m.MessageID.String(), "transactionId": m.TransactionID,
			"partitionId": m.PartitionID.String(), "queuePath": m.Queue + "/" + m.Partition, "queue": m.Queue,
			"partition": m.Partition, "status": m.Status, "createdAt": timeMillis(m.Created())}
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// handleBuffers serves GET /api/v1/status/buffers. Queen buffers pushes on
// disk while the database is down; Regina has no such buffer (a push is
// answered after its commit, or with a retryable 5xx), so nothing is ever
// pending or failed there. dbHealthy is a live ping.
func (s *Server) handleBuffers(ctx *fasthttp.RequestCtx) {
	healthy := s.b.Pinger.Ping(ctx) == nil
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"pending": 0, "failed": 0, "dbHealthy": healthy, "worker": 0})
}

// handleStatsRefresh serves POST /api/v1/stats/refresh. Queen recounts its
// cached statistics; Regina counts on every read, so there is nothing to
// refresh.
func (s *Server) handleStatsRefresh(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "skipped": true,
		"reason": "Regina computes the statistics on every read; nothing is cached"})
}

// handleMigrationStatus serves GET /api/v1/migration/status: Regina does
// not copy databases, so no migration ever runs.
func (s *Server) handleMigrationStatus(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"status": "idle", "currentStep": "", "elapsedSeconds": 0,
		"error": nil, "dumpOutput": "", "restoreOutput": ""})
}

// handleNotSupported answers a Queen route Regina does not implement: 501
// with the reason.
func notSupported(msg string) handler {
	return func(_ *Server, ctx *fasthttp.RequestCtx, _ []string) {
		writeError(ctx, fasthttp.StatusNotImplemented, msg)
	}
}
