package wire

import (
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// handlePush serves POST /api/v1/push: 201 with one result per item, in
// request order; 503 (retryable, nothing written) while push maintenance is
// on. Items of different partitions commit independently; when
// some partitions fail and others commit, the failed items say so
// (status "failed", "error", "retryable"); when all fail, the status is 5xx.
func (s *Server) handlePush(ctx *fasthttp.RequestCtx) {
	items, err := DecodePush(ctx.PostBody())
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	if len(items) == 0 {
		writeRaw(ctx, fasthttp.StatusCreated, []byte("[]"))
		return
	}
	if s.b.Maintenance.Current().Push {
		refusePushForMaintenance(ctx)
		return
	}
	// A producerSub in the body is never read: the token's sub is stamped.
	groups, refs := groupPush(items, producerSub(ctx))
	// Not ctx itself: it is done at shutdown, which must answer every push
	// already waiting with its verdict. pctx ends when the client is gone.
	pctx, stop := clientContext(ctx)
	s.b.Pusher.Push(pctx, groups)
	stop()
	s.countPush(groups)

	var failed error
	ok := 0
	for _, g := range groups {
		if g.Err != nil {
			failed = g.Err
		} else {
			ok++
		}
	}
	if ok == 0 {
		s.writeCoreError(ctx, failed)
		return
	}
	b := make([]byte, 0, 64+len(items)*200)
	b = append(b, '[')
	for i := range items {
		if i > 0 {
			b = append(b, ',')
		}
		g := groups[refs[i].group]
		b = appendPushResult(b, i, &items[i], g, refs[i].pos)
	}
	b = append(b, ']')
	writeRaw(ctx, fasthttp.StatusCreated, b)
}

// conflictText is the error of a conflict verdict.
func conflictText(original partition.UUID) string {
	if original.IsZero() {
		return "transactionId already used for a different payload (original message_id " + original.String() +
			": its segment was removed by retention); nothing was written"
	}
	return "transactionId already used for a different payload (original message_id " + original.String() +
		"); nothing was written"
}

func appendPushResult(b []byte, index int, it *PushItem, g *reginatype.PushGroup, pos int) []byte {
	b = append(b, `{"index":`...)
	b = appendInt(b, int64(index))
	if g.Err != nil {
		_, msg := errorStatus(g.Err)
		b = append(b, `,"transaction_id":`...)
		b = appendString(b, it.TransactionID)
		b = append(b, `,"queueName":`...)
		b = appendString(b, it.Queue)
		b = append(b, `,"status":"failed","error":`...)
		b = appendString(b, msg)
		return append(b, `,"retryable":true}`...)
	}
	r := g.Results[pos]
	b = append(b, `,"message_id":"`...)
	b = r.MessageID.AppendText(b)
	b = append(b, `","transaction_id":`...)
	b = appendString(b, it.TransactionID)
	b = append(b, `,"queueName":`...)
	b = appendString(b, it.Queue)
	b = append(b, `,"status":"`...)
	b = append(b, r.Status.String()...)
	b = append(b, '"')
	// Only on a queue with dedupPayloadCheck report or reject, and only when
	// the original has a fingerprint: a queue with it off answers as before.
	switch r.Payload {
	case partition.PayloadUnchecked:
	case partition.PayloadSame:
		b = append(b, `,"payloadMismatch":false`...)
	case partition.PayloadDifferent:
		b = append(b, `,"payloadMismatch":true`...)
	}
	if r.Status == partition.StatusConflict {
		b = append(b, `,"error":`...)
		b = appendString(b, conflictText(r.MessageID))
	}
	if r.Status == partition.StatusQueued {
		b = append(b, `,"partition_id":"`...)
		b = g.PartitionID.AppendText(b)
		b = append(b, `","trace_id":`...)
		if it.HasTrace {
			b = append(b, '"')
			b = it.TraceID.AppendText(b)
			b = append(b, '"')
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}
