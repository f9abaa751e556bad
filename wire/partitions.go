package wire

import (
	"github.com/valyala/fasthttp"
)

// handleListPartitions serves GET /api/v1/resources/partitions (queue,
// namespace/ns, task filter): every partition with its queue and queue
// mode's counts (pending without the leased messages, as
// /api/v1/resources/queues counts them). Queen's clients call it; Queen's
// server does not serve it.
func (s *Server) handleListPartitions(ctx *fasthttp.RequestCtx) {
	qs, _, err := s.b.Admin.QueueDetails(ctx, queueFilter(ctx.QueryArgs()))
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := []map[string]any{}
	for i := range qs {
		q := &qs[i]
		for j := range q.Partitions {
			p := &q.Partitions[j]
			st := p.Stats()
			out = append(out, map[string]any{"id": p.ID.String(), "name": p.Name, "queue": q.Name,
				"namespace": q.Namespace, "task": q.Task, "createdAt": timeMillis(p.CreatedAt),
				"messages": messageCounts{Total: st.Total, Pending: max(st.Pending-st.Processing, 0),
					Processing: st.Processing, Completed: st.Completed},
				"oldestMessage": timePtr(p.OldestAt), "newestMessage": timePtr(p.NewestAt)})
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"partitions": out})
}
