package wire

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Dedup inspection: GET /api/v1/dedup/explain and POST /api/v1/dedup/lookup.
// Both run the push's probe read-only and write nothing.

// reasonSegmentRemoved explains a zero-UUID original.
const reasonSegmentRemoved = "segment removed by retention: its transaction id is still in the hash sidecar, " +
	"its message is gone"

// reasonDeleted explains the zero-UUID original of a deleted message.
const reasonDeleted = "message deleted (DELETE /api/v1/messages): its transaction id is still in the hash sidecar, " +
	"its message is gone"

type occurrenceView struct {
	Offset       int64   `json:"offset"`
	MessageID    string  `json:"messageId"`
	StoredAt     string  `json:"storedAt"`
	WindowEndsAt *string `json:"windowEndsAt"`
	InWindow     bool    `json:"inWindow"`
	SegmentGone  bool    `json:"segmentRemoved"`
	// PayloadFingerprint: 16 hex digits, null when stored without one.
	PayloadFingerprint *string `json:"payloadFingerprint"`
}

type explainView struct {
	Queue           string  `json:"queue"`
	Partition       string  `json:"partition"`
	TransactionID   string  `json:"transactionId"`
	Verdict         string  `json:"verdict"`
	QueueExists     bool    `json:"queueExists"`
	PartitionExists bool    `json:"partitionExists"`
	PartitionID     *string `json:"partitionId"`
	WindowSeconds   int     `json:"windowSeconds"`
	PayloadCheck    string  `json:"payloadCheck"`
	// PayloadFingerprint is the given payload's (null when none was
	// given); PayloadMismatch whether it differs from the original's, as
	// a push would answer (null when no payload was given, nothing is
	// stored or the original has no fingerprint).
	PayloadFingerprint *string `json:"payloadFingerprint"`
	PayloadMismatch    *bool   `json:"payloadMismatch"`
	// MessageID is the original a push would name (duplicate), or the newest
	// stored copy (expired, disabled); null when nothing is stored.
	MessageID             *string          `json:"messageId"`
	OriginalUnknown       bool             `json:"originalUnknown"`
	OriginalUnknownReason *string          `json:"originalUnknownReason"`
	StoredAt              *string          `json:"storedAt"`
	WindowEndsAt          *string          `json:"windowEndsAt"`
	Offset                *int64           `json:"offset"`
	Occurrences           []occurrenceView `json:"occurrences"`
	CheckedAt             string           `json:"checkedAt"`
	Note                  string           `json:"note"`
}

func windowEnd(at time.Time, window int) *string {
	if window <= 0 {
		return nil
	}
	return new(timeMicros(at.Add(time.Duration(window) * time.Second)))
}

func timeMicros(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

// fingerprintText renders a payload fingerprint as 16 hex digits.
func fingerprintText(fp int64) string { return fmt.Sprintf("%016x", uint64(fp)) }

func fingerprintView(fp *int64) *string {
	if fp == nil {
		return nil
	}
	return new(fingerprintText(*fp))
}

// payloadMismatchView is false (same), true (different) or nil (not
// compared), as a push answers payloadMismatch.
func payloadMismatchView(m partition.PayloadMatch) *bool {
	switch m {
	case partition.PayloadSame:
		return new(false)
	case partition.PayloadDifferent:
		return new(true)
	case partition.PayloadUnchecked:
	}
	return nil
}

func newExplainView(k reginatype.ExplainKey, r *reginatype.ExplainResult) explainView {
	v := explainView{Queue: k.Queue, Partition: k.Partition, TransactionID: k.TransactionID, Verdict: r.Verdict,
		QueueExists: r.QueueExists, PartitionExists: r.PartitionExists, WindowSeconds: r.WindowSeconds,
		PayloadCheck: r.PayloadCheck, PayloadMismatch: payloadMismatchView(r.Payload),
		Occurrences: make([]occurrenceView, 0, len(r.Occurrences)), CheckedAt: timeMicros(r.Now)}
	if r.PayloadGiven {
		v.PayloadFingerprint = new(fingerprintText(r.PayloadFingerprint))
	}
	if r.PartitionExists {
		v.PartitionID = new(r.PartitionID.String())
	}
	for _, o := range r.Occurrences {
		v.Occurrences = append(v.Occurrences, occurrenceView{Offset: o.Offset, MessageID: o.MessageID.String(),
			StoredAt: timeMicros(o.CreatedAt), WindowEndsAt: windowEnd(o.CreatedAt, r.WindowSeconds),
			InWindow: o.InWindow, SegmentGone: o.SegmentGone, PayloadFingerprint: fingerprintView(o.Fingerprint)})
	}
	if o := r.Original; o != nil {
		v.MessageID = new(o.MessageID.String())
		v.StoredAt = new(timeMicros(o.CreatedAt))
		v.WindowEndsAt = windowEnd(o.CreatedAt, r.WindowSeconds)
		off := o.Offset
		v.Offset = &off
		switch {
		case o.SegmentGone:
			v.OriginalUnknown = true
			v.OriginalUnknownReason = new(reasonSegmentRemoved)
		case o.MessageID.IsZero():
			v.OriginalUnknown = true
			v.OriginalUnknownReason = new(reasonDeleted)
		}
	}
	switch {
	case !r.QueueExists:
		v.Note = "queue does not exist: a push would create it (window " + strconv.Itoa(r.WindowSeconds) +
			" s) and queue the message"
	case !r.PartitionExists:
		v.Note = "partition does not exist: a push would create it and queue the message"
	case r.Verdict == reginatype.ExplainDisabled:
		v.Note = "deduplication is off on this queue (dedupWindowSeconds 0): a push is never checked and is queued"
	case r.Verdict == reginatype.ExplainConflict:
		v.Note = "stored inside the window with another payload, and the queue rejects that (dedupPayloadCheck " +
			"reject): a push of this payload would be answered conflict and write nothing"
	case r.Verdict == reginatype.ExplainDuplicate && r.Payload == partition.PayloadDifferent:
		v.Note = "stored inside the window with another payload: a push would be answered duplicate with " +
			"payloadMismatch and write nothing (the given payload would be lost)"
	case r.Verdict == reginatype.ExplainDuplicate && v.OriginalUnknown:
		v.Note = "stored inside the window: a push would be answered duplicate with the zero UUID (" +
			*v.OriginalUnknownReason + ") and write nothing"
	case r.Verdict == reginatype.ExplainDuplicate:
		v.Note = "stored inside the window: a push would be answered duplicate with this messageId and write nothing"
	case r.Verdict == reginatype.ExplainExpired:
		v.Note = "stored, but its window has ended: a push would be queued as a new, independent message"
	default:
		v.Note = "not in this partition's hash sidecar: a push would be queued"
	}
	return v
}

// handleDedupExplain serves GET /api/v1/dedup/explain?queue=&partition=&transactionId=.
func (s *Server) handleDedupExplain(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	k := reginatype.ExplainKey{Queue: string(args.Peek("queue")), Partition: string(args.Peek("partition")),
		TransactionID: string(args.Peek("transactionId"))}
	if k.Queue == "" || k.TransactionID == "" {
		writeError(ctx, fasthttp.StatusBadRequest, "queue and transactionId are required")
		return
	}
	// What a push of this item would be refused for, explain refuses too
	// (the same 400 and text); a missing partition is Default, as in a push.
	if k.Partition == "" {
		k.Partition = reginatype.DefaultPartition
	}
	if err := checkExplainKey(k); err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if args.Has("payload") {
		k.Payload = append([]byte{}, args.Peek("payload")...)
		if err := checkPayload(k.Payload); err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, err.Error())
			return
		}
	}
	res, err := s.b.Admin.Explain(ctx, []reginatype.ExplainKey{k})
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, newExplainView(k, &res[0]))
}

type lookupView struct {
	Index         int      `json:"index"`
	Queue         string   `json:"queue"`
	Partition     string   `json:"partition"`
	TransactionID string   `json:"transactionId"`
	Committed     bool     `json:"committed"`
	MessageID     *string  `json:"messageId"`
	MessageIDs    []string `json:"messageIds"`
	PartitionID   *string  `json:"partitionId"`
	StoredAt      *string  `json:"storedAt"`
	InWindow      bool     `json:"inWindow"`
	Verdict       string   `json:"verdict"`
	// PayloadMismatch: the item's payload differs from the original's
	// (null when none was given or it cannot be told).
	PayloadMismatch *bool `json:"payloadMismatch"`
}

// checkPayload accepts one JSON value (the payload a push would carry).
func checkPayload(p []byte) error {
	if kindOf(p) == kindMissing || !json.Valid(p) {
		return errors.New("payload must be one JSON value, exactly as a push would send it")
	}
	return nil
}

// DecodeLookup decodes and validates a POST /api/v1/dedup/lookup body: at
// most reginatype.MaxExplainKeys (queue, partition, transactionId) triples; a
// missing partition means Default, as in a push.
func DecodeLookup(body []byte) ([]reginatype.ExplainKey, error) {
	if err := checkBody(body); err != nil {
		return nil, err
	}
	if kindOf(body) != kindObject {
		return nil, errors.New("Request body must be a JSON object")
	}
	var top struct {
		Items json.RawMessage `json:"items"`
	}
	if err := unmarshal(body, &top); err != nil {
		return nil, invalidJSON(err)
	}
	if kindOf(top.Items) != kindArray {
		return nil, errors.New("items array is required")
	}
	var raws []struct {
		Queue         json.RawMessage `json:"queue"`
		Partition     json.RawMessage `json:"partition"`
		TransactionID json.RawMessage `json:"transactionId"`
		Payload       json.RawMessage `json:"payload"`
	}
	if err := unmarshal(top.Items, &raws); err != nil {
		return nil, errors.New("Each item must be an object")
	}
	if len(raws) > reginatype.MaxExplainKeys {
		return nil, errors.New("At most " + strconv.Itoa(reginatype.MaxExplainKeys) +
			" items per lookup (got " + strconv.Itoa(len(raws)) + ")")
	}
	keys := make([]reginatype.ExplainKey, len(raws))
	for i, r := range raws {
		bad := func(msg string) error { return errors.New("items[" + strconv.Itoa(i) + "]: " + msg) }
		var err error
		if kindOf(r.Queue) != kindString {
			return nil, bad("queue must be a string")
		}
		if keys[i].Queue, err = rawString(r.Queue); err != nil {
			return nil, bad("queue must be a string")
		}
		switch kindOf(r.Partition) {
		case kindMissing, kindNull:
			keys[i].Partition = reginatype.DefaultPartition
		case kindString:
			if keys[i].Partition, err = rawString(r.Partition); err != nil {
				return nil, bad("partition must be a string")
			}
			if keys[i].Partition == "" {
				keys[i].Partition = reginatype.DefaultPartition
			}
		default:
			return nil, bad("partition must be a string")
		}
		if kindOf(r.TransactionID) != kindString {
			return nil, bad("transactionId must be a string")
		}
		if keys[i].TransactionID, err = rawString(r.TransactionID); err != nil || keys[i].TransactionID == "" {
			return nil, bad("transactionId must be a non-empty string")
		}
		if err := checkExplainKey(keys[i]); err != nil {
			return nil, bad(err.Error())
		}
		if kindOf(r.Payload) != kindMissing {
			keys[i].Payload = r.Payload
		}
	}
	return keys, nil
}

// checkExplainKey refuses what a push would refuse in a key: a queue or
// partition name, or a transactionId, that breaks the push's rules.
func checkExplainKey(k reginatype.ExplainKey) error {
	if err := checkName("queue", k.Queue); err != nil {
		return err
	}
	if err := checkName("partition", k.Partition); err != nil {
		return err
	}
	return checkTransactionID(k.TransactionID)
}

// handleDedupLookup serves POST /api/v1/dedup/lookup
// {"items":[{"queue","partition","transactionId"}, ...]} (at most 1000; a
// missing partition is Default, as in a push): whether each transaction id is
// committed (stored in its partition's hash sidecar) and its original ids.
func (s *Server) handleDedupLookup(ctx *fasthttp.RequestCtx) {
	keys, err := DecodeLookup(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	res, err := s.b.Admin.Explain(ctx, keys)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]lookupView, len(keys))
	for i := range keys {
		r := &res[i]
		v := lookupView{Index: i, Queue: keys[i].Queue, Partition: keys[i].Partition,
			TransactionID: keys[i].TransactionID, Committed: len(r.Occurrences) > 0, Verdict: r.Verdict,
			MessageIDs: make([]string, 0, len(r.Occurrences)), PayloadMismatch: payloadMismatchView(r.Payload)}
		if r.PartitionExists {
			v.PartitionID = new(r.PartitionID.String())
		}
		for _, o := range r.Occurrences {
			v.MessageIDs = append(v.MessageIDs, o.MessageID.String())
		}
		if o := r.Original; o != nil {
			v.MessageID = new(o.MessageID.String())
			v.StoredAt = new(timeMicros(o.CreatedAt))
			v.InWindow = o.InWindow
		}
		out[i] = v
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"results": out})
}
