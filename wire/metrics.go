package wire

import (
	"runtime/debug"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/reginatype"
)

// instrumented is the server's handler: Handle, timed and counted by route
// label (the route's pattern, never the raw path), method and status.
func (s *Server) instrumented(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	s.countRequest()
	s.handleRecovering(ctx)
	s.metrics.ObserveHTTP(routeLabel(requestPath(ctx)), methodLabel(ctx.Method()), ctx.Response.StatusCode(),
		time.Since(start))
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
