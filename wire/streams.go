package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// The streams v1 API (Queen's streaming SDKs): register a query, read its
// state, commit a cycle. Request fields are snake_case at the top level, the
// queue API's camelCase inside ack and push_items.

var errNotObject = errors.New("request body must be a JSON object")

// decodeStreamsBody applies the checks every streams request shares: a
// non-empty, parsable JSON object.
func decodeStreamsBody(body []byte, v any) error {
	if err := checkBody(body); err != nil {
		return err
	}
	return decodeStreamsObject(body, v)
}

// decodeStreamsObject is decodeStreamsBody without the NUL check, for the
// cycle, which answers NUL as its other refusals (cycleNUL).
func decodeStreamsObject(body []byte, v any) error {
	if err := checkBodySyntax(body); err != nil {
		return err
	}
	if err := unmarshal(body, new(json.RawMessage)); err != nil {
		return invalidJSON(err)
	}
	if kindOf(body) != kindObject {
		return errNotObject
	}
	if err := unmarshal(body, v); err != nil {
		return invalidJSON(err)
	}
	return nil
}

// requiredString returns a non-empty string field, or the spec's
// "<name> is required".
func requiredString(raw json.RawMessage, name string) (string, error) {
	if kindOf(raw) != kindString {
		return "", errors.New(name + " is required")
	}
	s, err := rawString(raw)
	if err != nil || s == "" {
		return "", errors.New(name + " is required")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return "", errors.New(name + " must not contain NUL characters")
	}
	return s, nil
}

// DecodeStreamQuery decodes and validates a POST /streams/v1/queries body.
func DecodeStreamQuery(body []byte) (reginatype.StreamQuery, error) {
	var q reginatype.StreamQuery
	var raw struct {
		Name        json.RawMessage `json:"name"`
		SourceQueue json.RawMessage `json:"source_queue"`
		SinkQueue   json.RawMessage `json:"sink_queue"`
		ConfigHash  json.RawMessage `json:"config_hash"`
		Reset       json.RawMessage `json:"reset"`
	}
	if err := decodeStreamsBody(body, &raw); err != nil {
		return q, err
	}
	var err error
	if q.Name, err = requiredString(raw.Name, "name"); err != nil {
		return q, err
	}
	if q.SourceQueue, err = requiredString(raw.SourceQueue, "source_queue"); err != nil {
		return q, err
	}
	if q.ConfigHash, err = requiredString(raw.ConfigHash, "config_hash"); err != nil {
		return q, err
	}
	switch kindOf(raw.SinkQueue) {
	case kindMissing, kindNull:
	case kindString:
		if q.SinkQueue, err = rawString(raw.SinkQueue); err != nil || strings.IndexByte(q.SinkQueue, 0) >= 0 {
			return q, errors.New("sink_queue must be a string without NUL characters")
		}
	default:
		return q, errors.New("sink_queue must be a string")
	}
	switch kindOf(raw.Reset) {
	case kindMissing, kindNull:
	case kindBool:
		q.Reset = string(raw.Reset) == "true"
	default:
		return q, errors.New("reset must be a boolean")
	}
	return q, nil
}

// handleStreamQuery serves POST /streams/v1/queries: 200 with the query's
// id, or 409 when the name is registered with another config_hash and no
// reset was asked (nothing changed).
func (s *Server) handleStreamQuery(ctx *fasthttp.RequestCtx) {
	q, err := DecodeStreamQuery(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	reg, err := s.b.Streams.RegisterStream(ctx, q)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	if reg.Mismatch {
		writeJSON(ctx, fasthttp.StatusConflict, map[string]any{"success": false, "query_id": reg.ID.String(),
			"name": q.Name, "error": "config_hash mismatch: the operator chain of '" + q.Name +
				"' differs from the registered one; rerun with reset:true to drop its state, or register under a new name"})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "query_id": reg.ID.String(), "name": q.Name,
		"config_hash": q.ConfigHash, "fresh": reg.Fresh, "reset": reg.Reset})
}

// streamIDs decodes query_id and partition_id: a missing or non-string one
// is an error; a malformed one sets malformed (qs and ps are then the ids
// that did parse, "" for the others).
func streamIDs(rawQ, rawP json.RawMessage) (q, p partition.UUID, qs, ps, malformed string, err error) {
	if qs, err = requiredString(rawQ, "query_id"); err != nil {
		return q, p, "", "", "", errors.New("query_id is required")
	}
	if ps, err = requiredString(rawP, "partition_id"); err != nil {
		return q, p, "", "", "", errors.New("partition_id is required")
	}
	q, qok := parseUUID(qs)
	if !qok {
		return q, p, "", "", "query_id must be a UUID", nil
	}
	p, pok := parseUUID(ps)
	if !pok {
		return q, p, qs, "", "partition_id must be a UUID", nil
	}
	return q, p, qs, ps, "", nil
}

func parseUUID(s string) (partition.UUID, bool) {
	u, err := partition.ParseUUID(s)
	return u, err == nil
}

// DecodeStateGet decodes and validates a POST /streams/v1/state/get body.
func DecodeStateGet(body []byte) (reginatype.StateFilter, error) {
	var f reginatype.StateFilter
	var raw struct {
		QueryID     json.RawMessage `json:"query_id"`
		PartitionID json.RawMessage `json:"partition_id"`
		Keys        json.RawMessage `json:"keys"`
		KeyPrefix   json.RawMessage `json:"key_prefix"`
		Ripe        json.RawMessage `json:"ripe_at_or_before"`
	}
	if err := decodeStreamsBody(body, &raw); err != nil {
		return f, err
	}
	var bad string
	var err error
	f.QueryID, f.PartitionID, _, _, bad, err = streamIDs(raw.QueryID, raw.PartitionID)
	if err != nil {
		return f, err
	}
	if bad != "" {
		return f, errors.New(bad)
	}
	// keys: missing, null, not an array or empty = no key filter; elements
	// that are not strings are ignored.
	if kindOf(raw.Keys) == kindArray {
		var elems []json.RawMessage
		if err := unmarshal(raw.Keys, &elems); err == nil && len(elems) > 0 {
			f.HasKeys = true
			for _, e := range elems {
				if kindOf(e) != kindString {
					continue
				}
				if k, err := rawString(e); err == nil {
					f.Keys = append(f.Keys, k)
				}
			}
		}
	}
	if kindOf(raw.KeyPrefix) == kindString {
		f.Prefix, _ = rawString(raw.KeyPrefix)
	}
	if kindOf(raw.Ripe) == kindNumber {
		v, err := strconv.ParseFloat(strings.TrimSpace(string(raw.Ripe)), 64)
		switch {
		case math.IsInf(v, 1):
			f.Ripe = "Infinity"
		case math.IsInf(v, -1):
			f.Ripe = "-Infinity"
		case err == nil:
			f.Ripe = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return f, nil
}

type stateRowView struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	UpdatedAt string          `json:"updated_at"`
}

// handleStateGet serves POST /streams/v1/state/get: the rows of one shard
// that pass the filters, sorted by key.
func (s *Server) handleStateGet(ctx *fasthttp.RequestCtx) {
	f, err := DecodeStateGet(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	rows, err := s.b.Streams.StreamState(ctx, f)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]stateRowView, len(rows))
	for i, r := range rows {
		out[i] = stateRowView{Key: r.Key, Value: r.Value,
			UpdatedAt: r.UpdatedAt.UTC().Format("2006-01-02T15:04:05.000Z")}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "rows": out})
}

// CycleRequest is a decoded POST /streams/v1/cycle body. Fail, when set, is
// a reason the cycle fails without touching the database (200,
// success:false), as upstream fails such cycles inside its transaction.
type CycleRequest struct {
	Cycle                reginatype.StreamCycle
	QueryID, PartitionID string // as sent, "" when not parsable
	Fail                 string
}

type rawCycleAck struct {
	TransactionID json.RawMessage `json:"transactionId"`
	LeaseID       json.RawMessage `json:"leaseId"`
	Status        json.RawMessage `json:"status"`
	Count         json.RawMessage `json:"count"`
	Error         json.RawMessage `json:"error"`
}

type rawStateOp struct {
	Type  json.RawMessage `json:"type"`
	Key   json.RawMessage `json:"key"`
	Value json.RawMessage `json:"value"`
}

// DecodeCycle decodes a POST /streams/v1/cycle body. An error is a 400
// (the body, query_id or partition_id); any other problem sets Fail.
//
// A push item without a transactionId gets one derived from the request's
// bytes and the item's position ("streams:<hash>:<index>"), not a random
// one: an HTTP retry of the same cycle sends the same bytes, so its sink
// pushes are duplicates inside the sink partition's dedup window and are
// written once.
func DecodeCycle(body []byte) (CycleRequest, error) {
	var req CycleRequest
	var raw struct {
		QueryID       json.RawMessage `json:"query_id"`
		PartitionID   json.RawMessage `json:"partition_id"`
		ConsumerGroup json.RawMessage `json:"consumer_group"`
		StateOps      json.RawMessage `json:"state_ops"`
		PushItems     json.RawMessage `json:"push_items"`
		Ack           json.RawMessage `json:"ack"`
		ReleaseLease  json.RawMessage `json:"release_lease"`
	}
	if err := decodeStreamsObject(body, &raw); err != nil {
		return req, err
	}
	c := &req.Cycle
	var err error
	c.QueryID, c.PartitionID, req.QueryID, req.PartitionID, req.Fail, err = streamIDs(raw.QueryID, raw.PartitionID)
	if err != nil || req.Fail != "" {
		return req, err
	}
	fail := func(format string, a ...any) (CycleRequest, error) {
		req.Fail = fmt.Sprintf(format, a...)
		return req, nil
	}
	// A string holding NUL is refused as the cycle's other bad input: with
	// success false, naming the field.
	if mayHoldNUL(body) {
		if paths := nulStrings(body); len(paths) > 0 {
			return fail("%s", (&nulError{path: paths[0]}).Error())
		}
	}
	switch kindOf(raw.ConsumerGroup) {
	case kindMissing, kindNull:
	case kindString:
		g, err := rawString(raw.ConsumerGroup)
		if err != nil || strings.IndexByte(g, 0) >= 0 {
			return fail("consumer_group must be a string without NUL characters")
		}
		c.Group = g
	default:
		return fail("consumer_group must be a string")
	}
	if c.Group == "" {
		c.Group = reginatype.QueueModeGroup
	}
	c.ReleaseLease = true
	switch kindOf(raw.ReleaseLease) {
	case kindMissing, kindNull:
	case kindBool:
		c.ReleaseLease = string(raw.ReleaseLease) == "true"
	default:
		return fail("release_lease must be a boolean")
	}
	switch kindOf(raw.StateOps) {
	case kindMissing, kindNull:
	case kindArray:
		var ops []json.RawMessage
		if err := unmarshal(raw.StateOps, &ops); err != nil {
			return fail("state_ops must be an array of objects")
		}
		for i, o := range ops {
			var r rawStateOp
			if kindOf(o) != kindObject || unmarshal(o, &r) != nil {
				return fail("state_ops[%d] must be an object", i)
			}
			typ, _ := rawString(r.Type)
			if kindOf(r.Type) != kindString {
				return fail("Unknown state_op type: %s", truncate(string(r.Type), 80))
			}
			op := reginatype.StateOp{}
			switch typ {
			case "upsert":
			case "delete":
				op.Delete = true
			default:
				return fail("Unknown state_op type: %s", truncate(typ, 80))
			}
			if kindOf(r.Key) == kindString {
				k, err := rawString(r.Key)
				if err != nil {
					return fail("state_ops[%d].key must be a string", i)
				}
				op.Key, op.HasKey = k, true
			}
			if !op.Delete {
				if !op.HasKey {
					return fail("state_ops[%d]: an upsert needs a string key", i)
				}
				op.Value = []byte("{}")
				if kindOf(r.Value) != kindMissing {
					op.Value = r.Value
				}
			}
			c.Ops = append(c.Ops, op)
		}
	default:
		return fail("state_ops must be an array")
	}
	switch kindOf(raw.PushItems) {
	case kindMissing, kindNull:
	case kindArray:
		var items []rawPushItem
		if err := unmarshal(raw.PushItems, &items); err != nil {
			return fail("push_items must be an array of objects")
		}
		var sum [sha256.Size]byte
		if len(items) > 0 {
			sum = sha256.Sum256(body)
		}
		prefix := "streams:" + hex.EncodeToString(sum[:16]) + ":"
		for i := range items {
			var it PushItem
			if err := decodeItem(&items[i], &it); err != nil {
				return fail("push_items[%d]: %v", i, err)
			}
			if it.Minted {
				it.TransactionID = prefix + strconv.Itoa(i)
			}
			if kindOf(items[i].Payload) == kindMissing {
				it.Payload = []byte("{}")
			}
			c.Pushes = append(c.Pushes, reginatype.TxnPush{Queue: it.Queue, Partition: it.Partition,
				TransactionID: it.TransactionID, TraceID: it.TraceID, HasTrace: it.HasTrace,
				Payload: it.Payload, Index: i})
		}
	default:
		return fail("push_items must be an array")
	}
	switch kindOf(raw.Ack) {
	case kindMissing, kindNull:
	case kindObject:
		var r rawCycleAck
		if err := unmarshal(raw.Ack, &r); err != nil {
			return fail("ack must be an object")
		}
		a := &reginatype.CycleAck{Status: reginatype.AckCompleted, Count: 1}
		tx, _ := rawString(r.TransactionID)
		if kindOf(r.TransactionID) != kindString || tx == "" {
			return fail("ack.transactionId is required")
		}
		a.TransactionID = tx
		if kindOf(r.LeaseID) == kindString {
			a.LeaseID, _ = rawString(r.LeaseID)
		}
		switch kindOf(r.Status) {
		case kindMissing, kindNull:
		case kindString:
			st, _ := rawString(r.Status)
			switch st {
			case "", "completed", "success":
			case "failed", "dlq":
				a.Status = reginatype.AckDLQ
			default:
				return fail("Unknown ack.status: %s", truncate(st, 80))
			}
		default:
			return fail("Unknown ack.status: %s", truncate(string(r.Status), 80))
		}
		if kindOf(r.Count) == kindNumber {
			if n, err := strconv.Atoi(strings.TrimSpace(string(r.Count))); err == nil {
				a.Count = n
			}
		}
		if kindOf(r.Error) == kindString {
			a.Error, _ = rawString(r.Error)
		}
		c.Ack = a
	default:
		return fail("ack must be an object or null")
	}
	return req, nil
}

// cyclePushView is a queued sink push's result.
type cyclePushView struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transaction_id"`
	Status        string  `json:"status"`
	MessageID     string  `json:"message_id"`
	PartitionID   string  `json:"partition_id"`
	TraceID       *string `json:"trace_id"`
	QueueName     string  `json:"queueName"`
}

// cycleDupView is a duplicate sink push's result (no partition or trace).
type cycleDupView struct {
	Index         int    `json:"index"`
	TransactionID string `json:"transaction_id"`
	Status        string `json:"status"`
	MessageID     string `json:"message_id"`
	QueueName     string `json:"queueName"`
}

type cycleAckView struct {
	Success       bool `json:"success"`
	Count         int  `json:"count"`
	LeaseReleased bool `json:"lease_released"`
	DLQ           bool `json:"dlq"`
}

type cycleView struct {
	Success         bool          `json:"success"`
	QueryID         string        `json:"query_id"`
	PartitionID     string        `json:"partition_id"`
	QueueName       *string       `json:"queueName"`
	StateOpsApplied int           `json:"state_ops_applied"`
	PushResults     []any         `json:"push_results"`
	AckResult       *cycleAckView `json:"ack_result"`
	Error           string        `json:"error,omitempty"`
}

// handleCycle serves POST /streams/v1/cycle: the state ops, sink pushes and
// ack in one transaction. A cycle that fails for a reason of its own answers
// 200 with success:false (the SDKs retry 5xx, and retrying it would fail
// the same way); 5xx only when the database failed and nothing committed
// (or, at COMMIT, the outcome is unknown; a retry then fails on the
// released lease or is deduplicated).
func (s *Server) handleCycle(ctx *fasthttp.RequestCtx) {
	req, err := DecodeCycle(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	view := cycleView{QueryID: req.QueryID, PartitionID: req.PartitionID, PushResults: []any{}}
	if req.Fail != "" {
		view.Error = req.Fail
		writeJSON(ctx, fasthttp.StatusOK, view)
		return
	}
	if sub := producerSub(ctx); sub != "" {
		for i := range req.Cycle.Pushes {
			req.Cycle.Pushes[i].ProducerSub = sub
		}
	}
	// As a push: a cycle already running is finished, not abandoned, when
	// the server shuts down.
	res, err := s.b.Cycler.StreamCycle(finishing(ctx), req.Cycle)
	if res.Queue != "" {
		view.QueueName = &res.Queue
	}
	if cerr, ok := errors.AsType[*reginatype.CycleError](err); ok {
		view.Error = cerr.Reason
		writeJSON(ctx, fasthttp.StatusOK, view)
		return
	}
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	view.Success = true
	view.StateOpsApplied = res.OpsApplied
	for _, p := range res.Pushes {
		it := &req.Cycle.Pushes[p.Index]
		if p.Duplicate {
			view.PushResults = append(view.PushResults, cycleDupView{Index: p.Index, TransactionID: it.TransactionID,
				Status: "duplicate", MessageID: p.MessageID.String(), QueueName: p.Queue})
			continue
		}
		pv := cyclePushView{Index: p.Index, TransactionID: it.TransactionID, Status: "queued",
			MessageID: p.MessageID.String(), PartitionID: p.PartitionID.String(), QueueName: p.Queue}
		if it.HasTrace {
			t := it.TraceID.String()
			pv.TraceID = &t
		}
		view.PushResults = append(view.PushResults, pv)
	}
	if res.Ack != nil {
		view.AckResult = &cycleAckView{Success: true, Count: res.Ack.Count, LeaseReleased: res.Ack.LeaseReleased,
			DLQ: res.Ack.DLQ}
	}
	writeJSON(ctx, fasthttp.StatusOK, view)
}
