package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Bounds on pop parameters.
const (
	MaxPopBatch   = 10000
	MaxPopTimeout = 10 * time.Minute
)

// PopParams are the decoded query parameters of a pop.
type PopParams struct {
	Req  reginatype.PopRequest
	Wait time.Duration
}

// queryBool is true for "true" or "1", as Queen reads booleans.
func queryBool(args *fasthttp.Args, key string) bool {
	v := string(args.Peek(key))
	return v == "true" || v == "1"
}

// queryInt returns the integer value of key, def when missing or bad.
func queryInt(args *fasthttp.Args, key string, def int) int {
	v := args.Peek(key)
	if len(v) == 0 {
		return def
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return def
	}
	return n
}

// SubscriptionModes are the values of subscriptionMode a pop accepts (and
// DEFAULT_SUBSCRIPTION_MODE may name), in the order error messages list
// them: every value Queen's clients send. "all" and "from_beginning" start a
// new named group at the beginning of what is stored; "new" and "new-only"
// (Queen documents it as an alias of "new") skip the history.
var SubscriptionModes = []string{"all", "from_beginning", "new", "new-only"}

// SubscriptionSkipsHistory reports whether subscriptionMode mode starts a
// new group at the time of its first pop; "" means "all". Any other value
// is an error listing the accepted ones.
func SubscriptionSkipsHistory(mode string) (bool, error) {
	switch mode {
	case "", "all", "from_beginning":
		return false, nil
	case "new", "new-only":
		return true, nil
	}
	return false, fmt.Errorf("subscriptionMode %q is not one of %s (empty means all)",
		mode, strings.Join(SubscriptionModes, ", "))
}

// DecodePop reads a pop's query parameters. Bad integers fall back to their
// defaults, as upstream does; a bad subscriptionFrom or subscriptionMode is a
// 400. defaultMode is the subscriptionMode of a pop that names none
// (DEFAULT_SUBSCRIPTION_MODE, checked at start).
func DecodePop(queue, part string, args *fasthttp.Args, defaultMode string) (PopParams, error) {
	var p PopParams
	r := &p.Req
	r.Queue, r.Partition = queue, part
	r.Group = string(args.Peek("consumerGroup"))
	if r.Group == "" {
		r.Group = reginatype.QueueModeGroup
	}
	r.Batch = min(max(queryInt(args, "batch", 1), 1), MaxPopBatch)
	r.Partitions = min(max(queryInt(args, "partitions", 1), 1), 1000)
	r.AutoAck = queryBool(args, "autoAck")
	mode := string(args.Peek("subscriptionMode"))
	if mode == "" {
		mode = defaultMode
	}
	skip, err := SubscriptionSkipsHistory(mode)
	if err != nil {
		return p, err
	}
	r.SubscriptionNew = skip
	switch from := string(args.Peek("subscriptionFrom")); from {
	case "":
	case "now":
		r.SubscriptionNew = true
	default:
		t, err := time.Parse(time.RFC3339Nano, from)
		if err != nil {
			return p, errors.New("subscriptionFrom must be \"now\" or an RFC 3339 timestamp")
		}
		r.SubscriptionFrom = t
	}
	if queryBool(args, "wait") {
		ms := queryInt(args, "timeout", 30000)
		p.Wait = min(time.Duration(max(ms, 0))*time.Millisecond, MaxPopTimeout)
	}
	return p, nil
}

func (s *Server) handlePop(ctx *fasthttp.RequestCtx, queue, part string) {
	p, err := DecodePop(queue, part, ctx.QueryArgs(), s.cfg.DefaultSubscriptionMode)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	// A long poll waits only while its client is there (watched): its
	// context ends when the client is seen gone. Without a wait the pop
	// runs under the request's own context.
	popCtx, watched, stopWatch := context.Context(ctx), context.Background(), func() {}
	if p.Wait > 0 {
		watched, stopWatch = clientContext(ctx)
		popCtx = watched
	}
	defer stopWatch()
	var paused bool
	if p.Wait, paused = s.popPaused(ctx, watched, p.Wait); paused {
		return
	}
	if p.Wait > 0 {
		s.stats.parkedDelta(queue, 1)
	}
	// Every pop takes a lease, autoAck ones too: an autoAck is applied only
	// once the answer was written (deliver), so that a client gone by then
	// loses nothing.
	req := p.Req
	req.AutoAck = false
	res, err := s.b.Popper.Pop(popCtx, req, p.Wait)
	if p.Wait > 0 {
		s.stats.parkedDelta(queue, -1)
	}
	if err != nil && watched.Err() != nil {
		// The client left while the store was asked: nothing was taken
		// (the pop's transaction did not commit) and nobody is listening.
		ctx.SetConnectionClose()
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	s.countPop(queue, &res)
	if len(res.Messages) == 0 {
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	d := &delivery{group: p.Req.Group, lease: res.LeaseID, consume: p.Req.AutoAck,
		partitions: make([]partition.UUID, len(res.Claimed))}
	for i, c := range res.Claimed {
		d.partitions[i] = c.ID
	}
	s.deliver(ctx, watched, d, popAnswer(queue, &p.Req, &res))
}

// popAnswer is the body of a pop's 200 answer.
func popAnswer(queue string, req *reginatype.PopRequest, res *reginatype.PopResult) []byte {
	b := make([]byte, 0, 256+len(res.Messages)*300)
	first := res.Claimed[0]
	lease := ""
	if !req.AutoAck {
		lease = res.LeaseID.String()
	}
	b = append(b, `{"success":true,"queue":`...)
	b = appendString(b, queue)
	b = append(b, `,"partition":`...)
	b = appendString(b, first.Name)
	b = append(b, `,"partitionId":"`...)
	b = first.ID.AppendText(b)
	b = append(b, `","leaseId":`...)
	b = appendString(b, lease)
	b = append(b, `,"consumerGroup":`...)
	b = appendString(b, req.Group)
	b = append(b, `,"partitionsClaimed":`...)
	b = appendInt(b, int64(len(res.Claimed)))
	b = append(b, `,"messages":[`...)
	for i := range res.Messages {
		m := &res.Messages[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":"`...)
		b = m.MessageID.AppendText(b)
		b = append(b, `","transactionId":`...)
		b = appendString(b, m.TransactionID)
		b = append(b, `,"traceId":`...)
		if m.HasTrace {
			b = append(b, '"')
			b = m.TraceID.AppendText(b)
			b = append(b, '"')
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"data":`...)
		b = append(b, m.Payload...)
		b = append(b, `,"producerSub":`...)
		b = appendSub(b, m.ProducerSub)
		b = append(b, `,"createdAt":"`...)
		b = m.Created().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
		b = append(b, `","queue":`...)
		b = appendString(b, queue)
		b = append(b, `,"partition":`...)
		b = appendString(b, m.PartitionName)
		b = append(b, `,"partitionId":"`...)
		b = m.PartitionID.AppendText(b)
		b = append(b, `","leaseId":`...)
		b = appendString(b, lease)
		b = append(b, `,"consumerGroup":`...)
		b = appendString(b, req.Group)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

type rawAck struct {
	TransactionID json.RawMessage `json:"transactionId"`
	PartitionID   json.RawMessage `json:"partitionId"`
	LeaseID       json.RawMessage `json:"leaseId"`
	Status        json.RawMessage `json:"status"`
	Error         json.RawMessage `json:"error"`
	ConsumerGroup json.RawMessage `json:"consumerGroup"`
}

// decodeAckItem validates one acknowledgement.
func decodeAckItem(r *rawAck, batch bool) (reginatype.AckItem, error) {
	var it reginatype.AckItem
	var err error
	if kindOf(r.TransactionID) != kindString {
		if batch {
			return it, errors.New("Each acknowledgment must have a valid transactionId string")
		}
		return it, errors.New("transactionId is required")
	}
	if it.TransactionID, err = rawString(r.TransactionID); err != nil || it.TransactionID == "" {
		return it, errors.New("transactionId is required")
	}
	if kindOf(r.PartitionID) != kindString {
		if batch {
			return it, errors.New("Each acknowledgment must have a valid partitionId string to ensure message uniqueness")
		}
		return it, errors.New("partitionId is required to ensure message uniqueness")
	}
	ps, _ := rawString(r.PartitionID)
	if it.PartitionID, err = partition.ParseUUID(ps); err != nil {
		return it, errors.New("partitionId must be a UUID")
	}
	if kindOf(r.LeaseID) == kindString {
		ls, _ := rawString(r.LeaseID)
		if ls != "" {
			if it.LeaseID, err = partition.ParseUUID(ls); err != nil {
				return it, errors.New("leaseId must be a UUID")
			}
			it.HasLease = true
		}
	}
	it.Status = "completed"
	switch kindOf(r.Status) {
	case kindMissing, kindNull:
	case kindString:
		it.Status, _ = rawString(r.Status)
		if it.Status == "" {
			it.Status = "completed"
		}
	default:
		return it, errors.New("status must be a string")
	}
	switch it.Status {
	case "completed", "success", "failed", "dlq", "retry":
	default:
		return it, errors.New("status must be completed, success, failed, dlq or retry")
	}
	if kindOf(r.Error) == kindString {
		it.Error, _ = rawString(r.Error)
	}
	return it, nil
}

func groupOf(raw json.RawMessage) string {
	if kindOf(raw) == kindString {
		if g, _ := rawString(raw); g != "" {
			return g
		}
	}
	return reginatype.QueueModeGroup
}

// DecodeAck decodes and validates a POST /api/v1/ack body.
func DecodeAck(body []byte) (group string, items []reginatype.AckItem, err error) {
	if err := checkBody(body); err != nil {
		return "", nil, err
	}
	if kindOf(body) != kindObject {
		return "", nil, errors.New("Request body must be a JSON object")
	}
	var r rawAck
	if err := unmarshal(body, &r); err != nil {
		return "", nil, invalidJSON(err)
	}
	it, err := decodeAckItem(&r, false)
	if err != nil {
		return "", nil, err
	}
	return groupOf(r.ConsumerGroup), []reginatype.AckItem{it}, nil
}

// DecodeAckBatch decodes and validates a POST /api/v1/ack/batch body. The
// top-level consumerGroup overrides per-item ones, as upstream does. An item
// holding NUL is an error here; the handler fails that item alone
// (decodeAckBatch).
func DecodeAckBatch(body []byte) (group string, items []reginatype.AckItem, err error) {
	group, items, refused, err := decodeAckBatch(body)
	for i := range items {
		if msg, ok := refused[i]; ok && err == nil {
			return "", nil, errors.New(msg)
		}
	}
	return group, items, err
}

// decodeAckBatch is DecodeAckBatch, but an item with a string holding NUL
// (nulStrings) is not an error of the whole body: refused maps its index to
// the reason, and the item is failed alone.
func decodeAckBatch(body []byte) (group string, items []reginatype.AckItem, refused map[int]string, err error) {
	if err := checkBodySyntax(body); err != nil {
		return "", nil, nil, err
	}
	if kindOf(body) != kindObject {
		return "", nil, nil, errors.New("Request body must be a JSON object")
	}
	if refused, err = refusedItems(body, "acknowledgments"); err != nil {
		return "", nil, nil, err
	}
	var top struct {
		Acks          json.RawMessage `json:"acknowledgments"`
		ConsumerGroup json.RawMessage `json:"consumerGroup"`
	}
	if err := unmarshal(body, &top); err != nil {
		return "", nil, nil, invalidJSON(err)
	}
	if kindOf(top.Acks) != kindArray {
		return "", nil, nil, errors.New("acknowledgments array is required")
	}
	var raws []rawAck
	if err := unmarshal(top.Acks, &raws); err != nil {
		return "", nil, nil, errors.New("Each acknowledgment must be an object")
	}
	items = make([]reginatype.AckItem, len(raws))
	for i := range raws {
		it, err := decodeAckItem(&raws[i], true)
		if _, bad := refused[i]; err != nil && !bad {
			return "", nil, nil, errors.New("acknowledgments[" + strconv.Itoa(i) + "]: " + err.Error())
		}
		items[i] = it
	}
	group = groupOf(top.ConsumerGroup)
	if len(top.ConsumerGroup) == 0 && len(raws) > 0 {
		group = groupOf(raws[0].ConsumerGroup)
	}
	return group, items, refused, nil
}

func (s *Server) handleAck(ctx *fasthttp.RequestCtx) {
	group, items, err := DecodeAck(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	s.ack(ctx, group, items, nil)
}

func (s *Server) handleAckBatch(ctx *fasthttp.RequestCtx) {
	group, items, refused, err := decodeAckBatch(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	s.ack(ctx, group, items, refused)
}

type ackResultView struct {
	Index         int     `json:"index"`
	TransactionID string  `json:"transactionId"`
	Success       bool    `json:"success"`
	Error         *string `json:"error"`
	QueueName     string  `json:"queueName"`
	PartitionName string  `json:"partitionName"`
	LeaseReleased bool    `json:"leaseReleased"`
	DLQ           bool    `json:"dlq"`
}

// ack acknowledges items but the refused ones (by index: the reason),
// which fail alone.
func (s *Server) ack(ctx *fasthttp.RequestCtx, group string, items []reginatype.AckItem, refused map[int]string) {
	var res []reginatype.AckResult
	if good := withoutRefused(items, refused); len(good) > 0 {
		var err error
		// finishing: an ack already queued is applied by the batcher
		// (closed after the server), whose own timeout bounds the wait.
		if res, err = s.b.Acker.Ack(finishing(ctx), group, good); err != nil {
			s.writeCoreError(ctx, err)
			return
		}
	}
	s.countUnresolvable(res)
	s.countAcks(res)
	res = withRefused(res, refused, len(items))
	out := make([]ackResultView, len(items))
	for i, r := range res {
		v := ackResultView{Index: i, TransactionID: items[i].TransactionID, Success: r.Success,
			QueueName: r.QueueName, PartitionName: r.PartitionName, LeaseReleased: r.LeaseReleased, DLQ: r.DLQ}
		if r.Error != "" {
			e := r.Error
			v.Error = &e
		}
		out[i] = v
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

func (s *Server) handleExtendLease(ctx *fasthttp.RequestCtx, leaseID string) {
	id, err := partition.ParseUUID(leaseID)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "leaseId must be a UUID")
		return
	}
	seconds := 60
	if body := ctx.PostBody(); len(strings.TrimSpace(string(body))) > 0 {
		if err := checkBody(body); err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, err.Error())
			return
		}
		var r struct {
			Seconds json.RawMessage `json:"seconds"`
		}
		if err := unmarshal(body, &r); err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, invalidJSON(err).Error())
			return
		}
		if kindOf(r.Seconds) == kindNumber {
			n, err := nonNegInt(r.Seconds)
			if err != nil || n == 0 {
				writeError(ctx, fasthttp.StatusBadRequest, "seconds must be a positive whole number")
				return
			}
			seconds = n
		}
	}
	exp, ok, expired, err := s.b.Acker.ExtendLease(finishing(ctx), id, seconds)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	v := map[string]any{"index": 0, "leaseId": id.String(), "success": ok, "error": nil}
	switch {
	case ok:
		ts := exp.UTC().Format("2006-01-02T15:04:05.000Z")
		v["expiresAt"], v["newExpiresAt"] = ts, ts
	case expired:
		v["error"] = "Lease already expired"
	default:
		v["error"] = "Lease not found"
	}
	writeJSON(ctx, fasthttp.StatusOK, []any{v})
}

func parseTimeParam(args *fasthttp.Args, key string) (time.Time, error) {
	v := string(args.Peek(key))
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, errors.New(key + " must be an RFC 3339 timestamp")
	}
	return t, nil
}

// parseTimeRange reads the optional from and to query parameters.
func parseTimeRange(args *fasthttp.Args) (from, to time.Time, err error) {
	if from, err = parseTimeParam(args, "from"); err != nil {
		return
	}
	to, err = parseTimeParam(args, "to")
	return
}

// maxDLQPage is the most dead letters GET /api/v1/dlq answers at once, and
// what it answers without a limit: Queen's dashboard has no paging and
// upstream returns every row, so a DLQ up to this size is seen whole;
// total says how many there are, and limit/offset page beyond.
const maxDLQPage = 10000

func (s *Server) handleDLQ(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	f := reginatype.DLQFilter{Queue: string(args.Peek("queue")), Group: string(args.Peek("consumerGroup")),
		Partition: string(args.Peek("partition")),
		Limit:     min(max(queryInt(args, "limit", maxDLQPage), 1), maxDLQPage), Offset: max(queryInt(args, "offset", 0), 0)}
	var err error
	if f.From, f.To, err = parseTimeRange(args); err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	list, total, err := s.b.Admin.ListDLQ(ctx, f)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	b := make([]byte, 0, 128+len(list)*300)
	b = append(b, `{"messages":[`...)
	for i := range list {
		d := &list[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":"`...)
		b = d.MessageID.AppendText(b)
		b = append(b, `","transactionId":`...)
		b = appendString(b, d.TransactionID)
		b = append(b, `,"traceId":`...)
		if d.TraceID != nil {
			b = append(b, '"')
			b = d.TraceID.AppendText(b)
			b = append(b, '"')
		} else {
			b = append(b, "null"...)
		}
		b = append(b, `,"partitionId":"`...)
		b = d.PartitionID.AppendText(b)
		b = append(b, `","queue":`...)
		b = appendString(b, d.Queue)
		b = append(b, `,"partition":`...)
		b = appendString(b, d.Partition)
		b = append(b, `,"consumerGroup":`...)
		b = appendString(b, d.Group)
		b = append(b, `,"errorMessage":`...)
		b = appendString(b, d.ErrorMessage)
		b = append(b, `,"retryCount":`...)
		b = appendInt(b, int64(d.RetryCount))
		b = append(b, `,"data":`...)
		b = append(b, d.Payload...)
		b = append(b, `,"producerSub":`...)
		b = appendSub(b, d.ProducerSub)
		b = append(b, `,"createdAt":"`...)
		b = d.CreatedAt.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
		b = append(b, `","failedAt":"`...)
		b = d.FailedAt.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z")
		b = append(b, `"}`...)
	}
	b = append(b, `],"total":`...)
	b = appendInt(b, total)
	b = append(b, `,"pagination":{"limit":`...)
	b = appendInt(b, int64(f.Limit))
	b = append(b, `,"offset":`...)
	b = appendInt(b, int64(f.Offset))
	b = append(b, "}}"...)
	writeRaw(ctx, fasthttp.StatusOK, b)
}

// handleDeleteGroup serves DELETE /api/v1/consumer-groups/:group (queue
// empty: every queue) and DELETE /api/v1/consumer-groups/:group/queues/:queue.
// deleteMetadata (default true) also removes the group's start points.
func (s *Server) handleDeleteGroup(ctx *fasthttp.RequestCtx, group, queue string) {
	deleteMeta := true
	if v := ctx.QueryArgs().Peek("deleteMetadata"); len(v) > 0 {
		deleteMeta = string(v) == "true" || string(v) == "1"
	}
	n, err := s.b.Groups.DeleteConsumerGroup(ctx, group, queue, deleteMeta)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	v := map[string]any{"success": true, "consumerGroup": group, "deletedPartitions": n, "metadataDeleted": deleteMeta}
	if queue != "" {
		v["queueName"], v["queue"] = queue, queue
	}
	writeJSON(ctx, fasthttp.StatusOK, v)
}

// handleSetSubscription serves POST /api/v1/consumer-groups/:group/subscription.
func (s *Server) handleSetSubscription(ctx *fasthttp.RequestCtx, group string) {
	var r struct {
		TS json.RawMessage `json:"subscriptionTimestamp"`
	}
	body := ctx.PostBody()
	if checkBody(body) != nil || unmarshal(body, &r) != nil || kindOf(r.TS) != kindString {
		writeError(ctx, fasthttp.StatusBadRequest, "Missing subscriptionTimestamp in request body")
		return
	}
	v, _ := rawString(r.TS)
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "subscriptionTimestamp must be an RFC 3339 timestamp")
		return
	}
	n, err := s.b.Groups.SetSubscription(ctx, group, t)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "consumerGroup": group,
		"newTimestamp": v, "rowsUpdated": n,
		"subscriptionTimestamp": t.UTC().Format(time.RFC3339Nano), "queuesUpdated": n})
}

// seek serves POST /api/v1/consumer-groups/:group/queues/:queue/seek (part
// empty, needTarget: toEnd or timestamp required) and
// .../partitions/:partition/seek (no target: the end).
func (s *Server) seek(ctx *fasthttp.RequestCtx, group, queue, part string, needTarget bool) {
	var r struct {
		ToEnd     json.RawMessage `json:"toEnd"`
		Timestamp json.RawMessage `json:"timestamp"`
	}
	body := ctx.PostBody()
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := checkBody(body); err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, err.Error())
			return
		}
		if err := unmarshal(body, &r); err != nil {
			writeError(ctx, fasthttp.StatusBadRequest, invalidJSON(err).Error())
			return
		}
	}
	at, err := seekTarget(r.ToEnd, r.Timestamp, needTarget)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	res, err := s.b.Groups.Seek(ctx, group, queue, part, at)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	if !res.Found {
		if part != "" {
			writeError(ctx, fasthttp.StatusNotFound, "Partition not found")
		} else {
			writeError(ctx, fasthttp.StatusNotFound, "Queue not found")
		}
		return
	}
	if part != "" {
		writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "consumerGroup": group, "queueName": queue,
			"queue": queue, "partitionName": part, "updated": res.Updated > 0, "partitionsUpdated": res.Updated,
			"cursorMovedTo": timePtr(res.MovedTo)})
		return
	}
	var target *string
	if !at.IsZero() {
		target = new(timeMillis(at))
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "consumerGroup": group, "queueName": queue,
		"queue": queue, "seekToEnd": at.IsZero(), "targetTimestamp": target, "partitionsUpdated": res.Updated})
}

// seekTarget reads a seek's body: toEnd (a boolean) wins over timestamp (an
// RFC 3339 string); the zero time means the end. Without needTarget (one
// partition's seek) the body is ignored: always the end.
func seekTarget(toEnd, timestamp json.RawMessage, needTarget bool) (time.Time, error) {
	if !needTarget {
		return time.Time{}, nil
	}
	switch kindOf(toEnd) {
	case kindMissing, kindNull:
	case kindBool:
		if string(bytes.TrimSpace(toEnd)) == "true" {
			return time.Time{}, nil
		}
	default:
		return time.Time{}, errors.New("toEnd must be a boolean")
	}
	switch kindOf(timestamp) {
	case kindMissing, kindNull:
		return time.Time{}, errors.New("Must specify either 'toEnd': true or 'timestamp'")
	case kindString:
		v, _ := rawString(timestamp)
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, errors.New("timestamp must be an RFC 3339 timestamp")
		}
		return t, nil
	default:
		return time.Time{}, errors.New("timestamp must be an RFC 3339 timestamp")
	}
}

// handleRetryMessage serves POST /api/v1/messages/:partitionId/:transactionId/retry:
// replay a dead letter into its partition (bypassing deduplication, which
// would otherwise swallow it). consumerGroup (query) limits it to one group's
// dead letter.
func (s *Server) handleRetryMessage(ctx *fasthttp.RequestCtx, partitionID, txID string) {
	pid, err := partition.ParseUUID(partitionID)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "partitionId must be a UUID")
		return
	}
	out, err := s.b.Replayer.ReplayDLQ(ctx, pid, txID, string(ctx.QueryArgs().Peek("consumerGroup")))
	if errors.Is(err, reginatype.ErrNotInDLQ) {
		writeError(ctx, fasthttp.StatusNotFound, "Message not found in the dead-letter queue")
		return
	}
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	replayed := make([]map[string]any, len(out))
	for i, r := range out {
		replayed[i] = map[string]any{"messageId": r.MessageID.String(), "offset": r.Offset}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "partitionId": pid.String(),
		"transactionId": txID, "replayed": replayed})
}
