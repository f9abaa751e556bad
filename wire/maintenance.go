package wire

import (
	"context"
	"errors"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/reginatype"
)

// Maintenance is the broker's maintenance switches, shared by every broker
// on the database (see sqlstore.Maintenance).
type Maintenance interface {
	// Current returns the switches as this broker knows them (no I/O):
	// what pushes and pops consult.
	Current() reginatype.MaintenanceState
	// Changed returns a channel closed at the next change of the switches.
	Changed() <-chan struct{}
	// Refresh reads the switches from the database.
	Refresh(ctx context.Context) (reginatype.MaintenanceState, error)
	// Set turns one switch on or off for every broker.
	Set(ctx context.Context, scope reginatype.MaintenanceScope, on bool) (reginatype.MaintenanceState, error)
}

// MaintenanceRetryAfter is the Retry-After (seconds) of a push refused by
// push maintenance.
const MaintenanceRetryAfter = "5"

// msgPushMaintenance is the error of a push refused by push maintenance.
const msgPushMaintenance = "Push maintenance mode is on: nothing was written; " +
	"retry later with the same transactionId (it is deduplicated)"

// refusePushForMaintenance answers a push while push maintenance is on:
// 503 (Queen's clients retry 5xx), nothing written.
func refusePushForMaintenance(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Retry-After", MaintenanceRetryAfter)
	b := make([]byte, 0, len(msgPushMaintenance)+64)
	b = append(b, `{"error":`...)
	b = appendString(b, msgPushMaintenance)
	b = append(b, `,"retryable":true,"maintenanceMode":true}`...)
	writeRaw(ctx, fasthttp.StatusServiceUnavailable, b)
}

// popPaused handles a pop while pop maintenance is on. Without a wait it
// answers 204 at once; with one it holds the request until the switch is
// turned off (and then returns the wait left, for a normal pop) or the wait
// ends (204). done is true when the pop was answered.
func (s *Server) popPaused(ctx *fasthttp.RequestCtx, waited context.Context, wait time.Duration) (left time.Duration, done bool) {
	if !s.b.Maintenance.Current().Pop {
		return wait, false
	}
	if wait <= 0 {
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return 0, true
	}
	deadline := time.Now().Add(wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		changed := s.b.Maintenance.Changed()
		if !s.b.Maintenance.Current().Pop {
			if left = time.Until(deadline); left > 0 {
				return left, false
			}
			break
		}
		select {
		case <-changed:
			continue
		case <-timer.C:
		case <-waited.Done(): // the client is gone
		case <-ctx.Done(): // the server is shutting down
		}
		break
	}
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return 0, true
}

// decodeEnabled reads the {"enabled": bool} body of the maintenance
// switches.
func decodeEnabled(body []byte) (bool, error) {
	if err := checkBody(body); err != nil {
		return false, err
	}
	if kindOf(body) != kindObject {
		return false, errors.New("Request body must be a JSON object")
	}
	var raw struct {
		Enabled json.RawMessage `json:"enabled"`
	}
	if err := unmarshal(body, &raw); err != nil {
		return false, invalidJSON(err)
	}
	if kindOf(raw.Enabled) != kindBool {
		return false, errors.New("enabled (boolean) is required")
	}
	var on bool
	if err := unmarshal(raw.Enabled, &on); err != nil {
		return false, errors.New("enabled (boolean) is required")
	}
	return on, nil
}

// bufferStats is upstream's disk-buffer block of the push maintenance view.
// Regina has no buffer (pushes are refused, never held), so it is always
// empty and healthy.
func bufferStats(dbHealthy bool) map[string]any {
	return map[string]any{"pendingCount": 0, "failedCount": 0, "dbHealthy": dbHealthy,
		"failedFiles": map[string]any{"count": 0, "totalBytes": 0, "totalMB": 0.0, "failoverCount": 0, "qos0Count": 0}}
}

// handleGetMaintenance serves GET /api/v1/system/maintenance: both switches,
// read fresh from the database (the last known ones when it does not
// answer, with bufferStats.dbHealthy false).
func (s *Server) handleGetMaintenance(ctx *fasthttp.RequestCtx) {
	st, err := s.b.Maintenance.Refresh(ctx)
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"maintenanceMode": st.Push, "popMaintenanceMode": st.Pop,
		"bufferedMessages": 0, "bufferHealthy": true, "bufferStats": bufferStats(err == nil),
		"message": pushMaintenanceText(st.Push),
	})
}

// handleSetMaintenance serves POST /api/v1/system/maintenance.
func (s *Server) handleSetMaintenance(ctx *fasthttp.RequestCtx) {
	on, err := decodeEnabled(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	st, err := s.b.Maintenance.Set(ctx, reginatype.MaintenancePush, on)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"maintenanceMode": st.Push, "popMaintenanceMode": st.Pop,
		"bufferedMessages": 0, "bufferHealthy": true, "message": pushMaintenanceText(st.Push),
	})
}

// handleGetPopMaintenance serves GET /api/v1/system/maintenance/pop.
func (s *Server) handleGetPopMaintenance(ctx *fasthttp.RequestCtx) {
	st, _ := s.b.Maintenance.Refresh(ctx)
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"popMaintenanceMode": st.Pop, "message": popMaintenanceText(st.Pop)})
}

// handleSetPopMaintenance serves POST /api/v1/system/maintenance/pop.
func (s *Server) handleSetPopMaintenance(ctx *fasthttp.RequestCtx) {
	on, err := decodeEnabled(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	st, err := s.b.Maintenance.Set(ctx, reginatype.MaintenancePop, on)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"popMaintenanceMode": st.Pop, "message": popMaintenanceText(st.Pop)})
}

func pushMaintenanceText(on bool) string {
	if on {
		return "Push maintenance mode is on: every broker refuses POST /api/v1/push with a retryable 503 " +
			"and writes nothing; producers retry with the same transactionId. Transactions, pops and acks go on."
	}
	return "Push maintenance mode is off: pushes are written normally."
}

func popMaintenanceText(on bool) string {
	if on {
		return "Pop maintenance mode is on: pops answer 204 with no messages (a waiting pop is held until " +
			"the mode is turned off or its timeout). Acks, lease extensions and pushes go on."
	}
	return "Pop maintenance mode is off: pops deliver messages normally."
}
