package wire

import (
	"runtime/debug"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/reginatype"
)

// instrumented is the server's handler: Handle, timed and counted by route
// template (never the raw path), method and status.
func (s *Server) instrumented(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	s.handleRecovering(ctx)
	path := string(ctx.URI().PathOriginal())
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	s.metrics.ObserveHTTP(routeTemplate(path), methodLabel(ctx.Method()), ctx.Response.StatusCode(), time.Since(start))
}

// handlePrometheus serves GET /metrics/prometheus in the Prometheus text
// format.
func (s *Server) handlePrometheus(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(metrics.ContentType)
	if err := s.metrics.WriteText(ctx); err != nil {
		s.log.Warn().Err(err).Msg("metrics: gather")
	}
}

// countUnresolvable counts the acks answered "unresolvable".
func (s *Server) countUnresolvable(res []reginatype.AckResult) {
	for i := range res {
		if res[i].Error == reginatype.AckErrUnresolvable {
			s.metrics.UnresolvableAck(res[i].QueueName)
		}
	}
}

func methodLabel(m []byte) string {
	switch string(m) {
	case "GET", "POST", "DELETE", "PUT", "HEAD", "OPTIONS", "PATCH":
		return string(m)
	}
	return "other"
}

// exactRoutes are the routes without parameters.
var exactRoutes = map[string]bool{
	"/health": true, "/metrics": true, "/metrics/prometheus": true,
	"/api/v1/push": true, "/api/v1/configure": true, "/api/v1/transaction": true,
	"/api/v1/ack": true, "/api/v1/ack/batch": true, "/api/v1/dlq": true,
	"/api/v1/resources/queues": true, "/api/v1/resources/overview": true,
	"/api/v1/resources/namespaces": true, "/api/v1/resources/tasks": true,
	"/api/v1/messages": true, "/api/v1/dedup/explain": true, "/api/v1/dedup/lookup": true,
	"/api/v1/status": true, "/api/v1/status/queues": true,
}

// routeTemplate maps a request path to its route template, "other" when no
// route matches. The set of results is fixed, so the label stays bounded.
func routeTemplate(path string) string {
	if exactRoutes[path] {
		return path
	}
	rest, ok := strings.CutPrefix(path, "/api/v1/")
	if !ok {
		return "other"
	}
	segs := strings.Split(strings.TrimSuffix(rest, "/"), "/")
	for _, s := range segs {
		if s == "" {
			return "other"
		}
	}
	n := len(segs)
	switch segs[0] {
	case "resources":
		if n == 3 && segs[1] == "queues" {
			return "/api/v1/resources/queues/:queue"
		}
	case "pop":
		switch {
		case n == 3 && segs[1] == "queue":
			return "/api/v1/pop/queue/:queue"
		case n == 5 && segs[1] == "queue" && segs[3] == "partition":
			return "/api/v1/pop/queue/:queue/partition/:partition"
		}
	case "lease":
		if n == 3 && segs[2] == "extend" {
			return "/api/v1/lease/:leaseId/extend"
		}
	case "messages":
		switch {
		case n == 3:
			return "/api/v1/messages/:partitionId/:transactionId"
		case n == 4 && segs[3] == "retry":
			return "/api/v1/messages/:partitionId/:transactionId/retry"
		}
	case "consumer-groups":
		switch {
		case n == 2:
			return "/api/v1/consumer-groups/:group"
		case n == 3 && segs[2] == "subscription":
			return "/api/v1/consumer-groups/:group/subscription"
		case n == 4 && segs[2] == "queues":
			return "/api/v1/consumer-groups/:group/queues/:queue"
		case n == 5 && segs[2] == "queues" && segs[4] == "seek":
			return "/api/v1/consumer-groups/:group/queues/:queue/seek"
		case n == 7 && segs[2] == "queues" && segs[4] == "partitions" && segs[6] == "seek":
			return "/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek"
		}
	case "status":
		if n == 3 && segs[1] == "queues" {
			return "/api/v1/status/queues/:queue"
		}
	}
	return "other"
}

// handleRecovering runs Handle and turns a panic (a bug: no input should
// cause one) into a 500 JSON error for this request, logged with its stack,
// instead of a crash of the whole broker.
func (s *Server) handleRecovering(ctx *fasthttp.RequestCtx) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error().Interface("panic", v).Bytes("path", ctx.URI().PathOriginal()).
				Str("stack", string(debug.Stack())).Msg("request handler panicked")
			ctx.Response.Reset()
			setCORS(ctx)
			writeError(ctx, fasthttp.StatusInternalServerError, "Internal error; the request may not have taken effect")
		}
	}()
	s.Handle(ctx)
}
