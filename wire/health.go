package wire

import (
	"context"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/reginatype"
)

// The probes: GET /health (Queen's, kept as it is: the database answers a
// ping), GET /health/live (the process serves HTTP; nothing else is
// checked) and GET /ready (the broker can take traffic: database, schema,
// mailbox pressure). While a server from NewStarting waits for its backend,
// these three and the Prometheus scrape are the only routes served; every
// other route answers a retryable 503 (answerStarting).

// handleHealth serves GET /health: 200 when the database answers, else 503,
// in Queen's shape. A broker still connecting to its database answers 503.
func (s *Server) handleHealth(ctx *fasthttp.RequestCtx) {
	status, db, code := "healthy", "connected", fasthttp.StatusOK
	var mst reginatype.MaintenanceState // what this broker applies (none while starting)
	if s.ready.Load() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := s.b.Pinger.Ping(c); err != nil {
			status, db, code = "unhealthy", "disconnected", fasthttp.StatusServiceUnavailable
		}
		mst = s.b.Maintenance.Current()
	} else {
		status, db, code = "unhealthy", "disconnected", fasthttp.StatusServiceUnavailable
	}
	writeJSON(ctx, code, map[string]any{
		"status": status, "database": db, "server": "Regina", "version": Version, "worker_id": 0,
		"shared_state": map[string]any{"enabled": false, "maintenance_mode": mst.Push, "pop_maintenance_mode": mst.Pop},
		"queen":        map[string]any{"worker_id": 0, "status": "active"},
	})
}

// handleLive serves GET /health/live: 200 as long as the process serves
// HTTP, whatever the database (a liveness probe that restarted a broker
// because its database is down would not bring the database back).
func (s *Server) handleLive(ctx *fasthttp.RequestCtx) {
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"status": "alive", "server": "Regina", "version": Version,
		"uptime": int64(time.Since(s.started).Seconds()),
	})
}

// handleReady serves GET /ready: 200 when the broker can take traffic, 503
// when it cannot (still connecting, database unreachable or read-only,
// schema not as this broker migrates it, a mailbox at its bound), with
// every check in the body.
func (s *Server) handleReady(ctx *fasthttp.RequestCtx) {
	if !s.ready.Load() {
		msg := "connecting to the database"
		if p := s.startErr.Load(); p != nil {
			msg = *p
		}
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, map[string]any{
			"status": "starting",
			"checks": map[string]any{"database": map[string]any{"ok": false, "error": msg}},
		})
		return
	}
	c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r := s.b.Readiness.Readiness(c)
	status, code := "ready", fasthttp.StatusOK
	if !r.Ready() {
		status, code = "not ready", fasthttp.StatusServiceUnavailable
	}
	writeJSON(ctx, code, map[string]any{
		"status": status,
		"checks": map[string]any{
			"database": withError(r.Database, map[string]any{"ok": r.Database.OK, "latencyMs": r.Database.LatencyMs}),
			"migrations": withError(r.Migrations, map[string]any{"ok": r.Migrations.OK,
				"version": r.Migrations.Version, "expected": r.Migrations.Expected}),
			"mailboxes": withError(r.Mailboxes, map[string]any{"ok": r.Mailboxes.OK, "actors": r.Mailboxes.Actors,
				"depth": r.Mailboxes.Depth, "full": r.Mailboxes.Full, "fullest": r.Mailboxes.Fullest}),
		},
	})
}

func withError(c reginatype.ReadinessCheck, m map[string]any) map[string]any {
	if c.Error != "" {
		m["error"] = c.Error
	}
	return m
}

// servesWhileStarting reports whether r answers before the backend is
// there: the probes and the Prometheus scrape.
func servesWhileStarting(r *Route) bool {
	switch r.Pattern {
	case "/health", "/health/live", "/ready", "/metrics/prometheus":
		return true
	}
	return false
}

// answerStarting answers a request that came before the backend: nothing
// was done, retry.
func answerStarting(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Retry-After", "1")
	writeRaw(ctx, fasthttp.StatusServiceUnavailable,
		[]byte(`{"error":"Broker is starting: not connected to its database yet; nothing was done; retry","retryable":true}`))
}
