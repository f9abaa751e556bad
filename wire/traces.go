package wire

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Trace events (Queen's msg.Trace): POST /api/v1/traces records one on a
// stored message; the GET views read them by message, by name, and list the
// names. Keys are snake_case, as Queen's.

type rawTrace struct {
	TransactionID json.RawMessage `json:"transactionId"`
	PartitionID   json.RawMessage `json:"partitionId"`
	Data          json.RawMessage `json:"data"`
	ConsumerGroup json.RawMessage `json:"consumerGroup"`
	EventType     json.RawMessage `json:"eventType"`
	TraceNames    json.RawMessage `json:"traceNames"`
}

// DecodeTrace decodes and validates a POST /api/v1/traces body into an event
// (without its ID and WorkerID).
func DecodeTrace(body []byte) (reginatype.TraceEvent, error) {
	var ev reginatype.TraceEvent
	if err := checkBody(body); err != nil {
		return ev, err
	}
	if kindOf(body) != kindObject {
		return ev, errors.New("Request body must be a JSON object")
	}
	var r rawTrace
	if err := unmarshal(body, &r); err != nil {
		return ev, invalidJSON(err)
	}
	if kindOf(r.TransactionID) == kindMissing || kindOf(r.PartitionID) == kindMissing {
		return ev, errors.New("transactionId and partitionId are required")
	}
	if kindOf(r.Data) == kindMissing {
		return ev, errors.New("data is required")
	}
	var err error
	if kindOf(r.TransactionID) != kindString {
		return ev, errors.New("transactionId must be a string")
	}
	if ev.TransactionID, err = rawString(r.TransactionID); err != nil || ev.TransactionID == "" {
		return ev, errors.New("transactionId must be a non-empty string")
	}
	if kindOf(r.PartitionID) != kindString {
		return ev, errors.New("partitionId must be a UUID")
	}
	ps, _ := rawString(r.PartitionID)
	if ev.PartitionID, err = partition.ParseUUID(ps); err != nil {
		return ev, errors.New("partitionId must be a UUID")
	}
	ev.Data = bytes.TrimSpace(r.Data)
	if ev.ConsumerGroup, err = optionalText(r.ConsumerGroup, "consumerGroup", reginatype.QueueModeGroup,
		reginatype.MaxTraceConsumerGroup); err != nil {
		return ev, err
	}
	if ev.EventType, err = optionalText(r.EventType, "eventType", reginatype.DefaultTraceEventType,
		reginatype.MaxTraceEventType); err != nil {
		return ev, err
	}
	ev.Names, err = traceNames(r.TraceNames)
	return ev, err
}

// optionalText reads an optional string field: def when missing, null or
// empty; at most max bytes.
func optionalText(raw json.RawMessage, name, def string, maxLen int) (string, error) {
	switch kindOf(raw) {
	case kindMissing, kindNull:
		return def, nil
	case kindString:
	default:
		return "", errors.New(name + " must be a string")
	}
	v, err := rawString(raw)
	if err != nil {
		return "", errors.New(name + " must be a string")
	}
	if v == "" {
		return def, nil
	}
	if len(v) > maxLen {
		return "", errors.New(name + " must be at most " + itoa(maxLen) + " bytes")
	}
	return v, nil
}

// traceNames reads traceNames: an array (a non-string element counts as its
// JSON text) or one string; anything else means no names. The result is
// sorted, without duplicates.
func traceNames(raw json.RawMessage) ([]string, error) {
	var names []string
	switch kindOf(raw) {
	case kindString:
		v, err := rawString(raw)
		if err != nil {
			return nil, errors.New("traceNames must be a string or an array")
		}
		names = []string{v}
	case kindArray:
		var elems []json.RawMessage
		if err := unmarshal(raw, &elems); err != nil {
			return nil, errors.New("traceNames must be a string or an array")
		}
		for _, e := range elems {
			if kindOf(e) == kindString {
				v, err := rawString(e)
				if err != nil {
					return nil, errors.New("traceNames must be a string or an array")
				}
				names = append(names, v)
				continue
			}
			names = append(names, string(bytes.TrimSpace(e)))
		}
	default:
		return []string{}, nil
	}
	for _, n := range names {
		if !utf8.ValidString(n) || strings.IndexByte(n, 0) >= 0 {
			return nil, errors.New("traceNames must be valid UTF-8 without NUL")
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// handleAddTrace serves POST /api/v1/traces: 201 {"success":true,"traceId"}
// (the new event's id), or 200 {"success":false,"error":"Message not
// found"} when the message is not stored (a 2xx, as upstream's, so that a
// consumer's trace call never fails its handler).
func (s *Server) handleAddTrace(ctx *fasthttp.RequestCtx) {
	ev, err := DecodeTrace(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	ev.ID = partition.NewV7()
	ev.WorkerID = s.instance
	found, err := s.b.Traces.AddTrace(ctx, &ev)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	if !found {
		writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": false, "error": "Message not found"})
		return
	}
	writeJSON(ctx, fasthttp.StatusCreated, map[string]any{"success": true, "traceId": ev.ID.String()})
}

// traceView is one event as the GET views show it.
type traceView struct {
	ID            string          `json:"id"`
	TransactionID *string         `json:"transaction_id,omitempty"`
	PartitionID   *string         `json:"partition_id,omitempty"`
	EventType     string          `json:"event_type"`
	Data          json.RawMessage `json:"data"`
	ConsumerGroup string          `json:"consumer_group"`
	WorkerID      string          `json:"worker_id"`
	CreatedAt     string          `json:"created_at"`
	QueueName     *string         `json:"queue_name,omitempty"`
	PartitionName *string         `json:"partition_name,omitempty"`
	// MessagePayload is only in the by-name view (null there when the
	// payload is gone).
	MessagePayload *json.RawMessage `json:"message_payload,omitempty"`
	TraceNames     []string         `json:"trace_names"`
}

func newTraceView(ev *reginatype.TraceEvent, byName bool) traceView {
	v := traceView{ID: ev.ID.String(), EventType: ev.EventType, Data: json.RawMessage(ev.Data),
		ConsumerGroup: ev.ConsumerGroup, WorkerID: ev.WorkerID, CreatedAt: timeMillis(ev.CreatedAt),
		TraceNames: ev.Names}
	if v.TraceNames == nil {
		v.TraceNames = []string{}
	}
	if len(v.Data) == 0 {
		v.Data = json.RawMessage("null")
	}
	if byName {
		v.TransactionID, v.PartitionID = new(ev.TransactionID), new(ev.PartitionID.String())
		v.QueueName, v.PartitionName = new(ev.Queue), new(ev.Partition)
		p := json.RawMessage("null")
		if len(ev.MessagePayload) > 0 {
			p = json.RawMessage(ev.MessagePayload)
		}
		v.MessagePayload = &p
	}
	return v
}

// handleTracesOfMessage serves GET /api/v1/traces/:partitionId/:transactionId:
// every event of the message, oldest first ({"traces":[]} for an unknown
// message).
func (s *Server) handleTracesOfMessage(ctx *fasthttp.RequestCtx, partitionID, txID string) {
	pid, err := partition.ParseUUID(partitionID)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "partitionId must be a UUID")
		return
	}
	evs, err := s.b.Traces.Traces(ctx, pid, txID)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]traceView, len(evs))
	for i := range evs {
		out[i] = newTraceView(&evs[i], false)
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"traces": out})
}

// page reads limit (def, 1 to MaxPageLimit) and offset (>= 0).
func page(args *fasthttp.Args, def int) (limit, offset int) {
	return min(max(queryInt(args, "limit", def), 1), MaxPageLimit), max(queryInt(args, "offset", 0), 0)
}

// MaxPageLimit bounds the limit of the paginated views.
const MaxPageLimit = 10000

// handleTracesByName serves GET /api/v1/traces/by-name/:name (limit 100,
// offset): the events carrying the name, oldest first, with their message's
// queue, partition and stored payload; total counts them all.
func (s *Server) handleTracesByName(ctx *fasthttp.RequestCtx, name string) {
	limit, offset := page(ctx.QueryArgs(), 100)
	evs, total, err := s.b.Traces.TracesByName(ctx, name, limit, offset)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]traceView, len(evs))
	for i := range evs {
		out[i] = newTraceView(&evs[i], true)
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"traces": out, "total": total,
		"pagination": map[string]any{"limit": limit, "offset": offset}})
}

// handleTraceNames serves GET /api/v1/traces/names (limit 50, offset): every
// trace name, most recently seen first, with its event and message counts.
func (s *Server) handleTraceNames(ctx *fasthttp.RequestCtx) {
	limit, offset := page(ctx.QueryArgs(), 50)
	names, total, err := s.b.Traces.TraceNames(ctx, limit, offset)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]map[string]any, len(names))
	for i, n := range names {
		out[i] = map[string]any{"trace_name": n.Name, "trace_count": n.Events, "message_count": n.Messages,
			"last_seen": timeMillis(n.LastSeen)}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"trace_names": out, "total": total,
		"pagination": map[string]any{"limit": limit, "offset": offset}})
}
