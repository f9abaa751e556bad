package wire

import (
	"errors"
	"fmt"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

type rawTxnOp struct {
	Type  json.RawMessage `json:"type"`
	Items json.RawMessage `json:"items"`
	rawAck
}

// TxnRequest is a decoded POST /api/v1/transaction body.
type TxnRequest struct {
	Pushes []reginatype.TxnPush
	Acks   []reginatype.TxnAck
	Leases []partition.UUID
	// Ops is the number of flattened operations (push items count one each).
	Ops int
}

// DecodeTransaction decodes and validates a transaction body. Push items are
// validated exactly as in a push; an ack's failed or dlq status sends the
// message to the DLQ (no retries inside a transaction).
func DecodeTransaction(body []byte) (TxnRequest, error) {
	var req TxnRequest
	if err := checkBody(body); err != nil {
		return req, err
	}
	if kindOf(body) != kindObject {
		return req, errors.New("Request body must be a JSON object")
	}
	var top struct {
		Operations     json.RawMessage `json:"operations"`
		RequiredLeases json.RawMessage `json:"requiredLeases"`
	}
	if err := unmarshal(body, &top); err != nil {
		return req, invalidJSON(err)
	}
	if kindOf(top.Operations) != kindArray {
		return req, errors.New("operations array required")
	}
	var ops []rawTxnOp
	if err := unmarshal(top.Operations, &ops); err != nil {
		return req, errors.New("Each operation must be an object")
	}
	if len(ops) == 0 {
		return req, errors.New("operations array cannot be empty")
	}
	switch kindOf(top.RequiredLeases) {
	case kindMissing, kindNull:
	case kindArray:
		var ls []json.RawMessage
		if err := unmarshal(top.RequiredLeases, &ls); err != nil {
			return req, errors.New("requiredLeases must be an array of lease ids")
		}
		for _, l := range ls {
			s, err := rawString(l)
			if kindOf(l) != kindString || err != nil {
				return req, errors.New("requiredLeases must be an array of lease ids")
			}
			id, err := partition.ParseUUID(s)
			if err != nil {
				return req, fmt.Errorf("requiredLeases: %q is not a lease id", truncate(s, 64))
			}
			req.Leases = append(req.Leases, id)
		}
	default:
		return req, errors.New("requiredLeases must be an array of lease ids")
	}
	for i := range ops {
		op := &ops[i]
		typ, _ := rawString(op.Type)
		if kindOf(op.Type) != kindString {
			return req, fmt.Errorf("operations[%d]: type is required", i)
		}
		switch typ {
		case "push":
			if kindOf(op.Items) != kindArray {
				return req, fmt.Errorf("operations[%d]: items array is required", i)
			}
			var raws []rawPushItem
			if err := unmarshal(op.Items, &raws); err != nil {
				return req, fmt.Errorf("operations[%d]: each item must be an object", i)
			}
			if len(raws) == 0 {
				return req, fmt.Errorf("operations[%d]: items array cannot be empty", i)
			}
			for j := range raws {
				var it PushItem
				if err := decodeItem(&raws[j], &it); err != nil {
					return req, fmt.Errorf("operations[%d].items[%d]: %w", i, j, err)
				}
				req.Pushes = append(req.Pushes, reginatype.TxnPush{Queue: it.Queue, Partition: it.Partition,
					TransactionID: it.TransactionID, TraceID: it.TraceID, HasTrace: it.HasTrace,
					Payload: it.Payload, Index: req.Ops})
				req.Ops++
			}
		case "ack":
			it, err := decodeAckItem(&op.rawAck, false)
			if err != nil {
				return req, fmt.Errorf("operations[%d]: %w", i, err)
			}
			switch it.Status {
			case "completed", "success":
				it.Status = "completed"
			case "failed", "dlq":
				it.Status = "dlq"
			default:
				return req, fmt.Errorf("operations[%d]: status %q is not allowed in a transaction (completed, failed or dlq)", i, it.Status)
			}
			req.Acks = append(req.Acks, reginatype.TxnAck{AckItem: it, Group: groupOf(op.ConsumerGroup), Index: req.Ops})
			req.Ops++
		default:
			return req, fmt.Errorf("Unknown operation type: %s", truncate(typ, 64))
		}
	}
	return req, nil
}

type txnResultView struct {
	Index         int     `json:"index"`
	Type          string  `json:"type"`
	Success       bool    `json:"success"`
	TransactionID string  `json:"transactionId"`
	MessageID     string  `json:"messageId,omitempty"`
	PartitionID   string  `json:"partitionId,omitempty"`
	QueueName     string  `json:"queueName,omitempty"`
	Status        string  `json:"status,omitempty"`
	Error         *string `json:"error,omitempty"`
	DLQ           *bool   `json:"dlq,omitempty"`
	// PayloadMismatch: a repeat inside the transaction on a queue with
	// dedupPayloadCheck report; absent when not compared.
	PayloadMismatch *bool `json:"payloadMismatch,omitempty"`
}

// handleTransaction serves POST /api/v1/transaction: 200 with every result,
// or 409 {"success":false,"error":...} when a duplicate push, a failed ack or
// a lease that is not live rolled the whole transaction back.
func (s *Server) handleTransaction(ctx *fasthttp.RequestCtx) {
	req, err := DecodeTransaction(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if sub := producerSub(ctx); sub != "" {
		for i := range req.Pushes {
			req.Pushes[i].ProducerSub = sub
		}
	}
	id := partition.NewV7().String()
	res, err := s.b.Transactor.Transaction(finishing(ctx), req.Pushes, req.Acks, req.Leases)
	var dup *reginatype.DuplicateError
	var ackErr *reginatype.TxnAckError
	switch {
	case errors.As(err, &dup):
		body := map[string]any{"transactionId": id, "success": false,
			"error": dup.Error(), "queue": dup.Queue, "partition": dup.Partition,
			"duplicateTransactionId": dup.TransactionID, "originalMessageId": dup.Original.String(),
			"results": []any{}}
		if dup.Payload != partition.PayloadUnchecked {
			body["payloadMismatch"] = dup.Payload == partition.PayloadDifferent
		}
		if dup.Conflict {
			body["status"] = "conflict"
		}
		writeJSON(ctx, fasthttp.StatusConflict, body)
		return
	case errors.As(err, &ackErr):
		writeJSON(ctx, fasthttp.StatusConflict, map[string]any{"transactionId": id, "success": false,
			"error": ackErr.Error(), "failedIndex": ackErr.Index, "results": []any{}})
		return
	case errors.Is(err, reginatype.ErrLeaseNotLive):
		writeJSON(ctx, fasthttp.StatusConflict, map[string]any{"transactionId": id, "success": false,
			"error":   "A required lease is not live (expired, released or unknown); nothing was applied",
			"results": []any{}})
		return
	case err != nil:
		s.writeCoreError(ctx, err)
		return
	}
	s.countTransaction(&res)
	out := make([]txnResultView, req.Ops)
	txIDs := make(map[int]string, len(req.Pushes))
	for _, p := range req.Pushes {
		txIDs[p.Index] = p.TransactionID
	}
	for _, p := range res.Pushes {
		status := "queued"
		if p.Duplicate {
			status = "duplicate"
		}
		out[p.Index] = txnResultView{Index: p.Index, Type: "push", Success: true,
			TransactionID: txIDs[p.Index], MessageID: p.MessageID.String(),
			PartitionID: p.PartitionID.String(), QueueName: p.Queue, Status: status}
		if p.Payload != partition.PayloadUnchecked {
			out[p.Index].PayloadMismatch = new(p.Payload == partition.PayloadDifferent)
		}
	}
	for i, a := range req.Acks {
		r := res.Acks[i]
		dlq := r.DLQ
		out[a.Index] = txnResultView{Index: a.Index, Type: "ack", Success: r.Success, TransactionID: a.TransactionID,
			DLQ: &dlq}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"transactionId": id, "success": true, "results": out})
}
