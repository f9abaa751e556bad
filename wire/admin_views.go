package wire

import (
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// The section-9 admin and status views. Every count is read in one snapshot
// (a read-only transaction). Message counts are per consumer group; the
// partition and queue "stats" are those of queue mode (Queen's default
// group), see reginatype.MessageStats for what each field means.

type consumerView struct {
	ConsumerGroup string `json:"consumerGroup"`
	CursorOffset  int64  `json:"cursorOffset"`
	// Pending is next_offset - cursor_offset (leased messages included);
	// Processing the leased part of it.
	Pending    int64 `json:"pending"`
	Processing int64 `json:"processing"`
	// LagSeconds is the age of the oldest message the group has not
	// consumed (0 when it is caught up); OldestPendingAt its stored time.
	LagSeconds      float64 `json:"lagSeconds"`
	OldestPendingAt *string `json:"oldestPendingAt"`
	LeaseID         *string `json:"leaseId"`
	LeaseExpiresAt  *string `json:"leaseExpiresAt"`
	LeaseFrom       *int64  `json:"leaseFrom"`
	LeaseTo         *int64  `json:"leaseTo"`
	RetryCount      int     `json:"retryCount"`
	UpdatedAt       string  `json:"updatedAt"`
}

type partitionView struct {
	ID           string                  `json:"id"`
	Name         string                  `json:"name"`
	CreatedAt    string                  `json:"createdAt"`
	NextOffset   int64                   `json:"nextOffset"`
	OldestOffset int64                   `json:"oldestOffset"`
	Stats        reginatype.MessageStats `json:"stats"`
	// Messages is Stats again (Queen's status view reads this name).
	Messages      reginatype.MessageStats `json:"messages"`
	Cursor        cursorTotals            `json:"cursor"`
	LastActivity  *string                 `json:"lastActivity"`
	OldestMessage *string                 `json:"oldestMessage"`
	NewestMessage *string                 `json:"newestMessage"`
	Consumers     []consumerView          `json:"consumers"`
}

// cursorTotals sums a partition's cursors: TotalConsumed is the messages
// every group has consumed (its cursor offset: offsets start at 0 and have
// no gaps, so retention does not lower it). Regina does not count batches:
// BatchesConsumed is null.
type cursorTotals struct {
	TotalConsumed   int64 `json:"totalConsumed"`
	BatchesConsumed *int  `json:"batchesConsumed"`
}

// groupView sums one consumer group over a queue's partitions (those it has
// a cursor on).
type groupView struct {
	ConsumerGroup string  `json:"consumerGroup"`
	Partitions    int     `json:"partitions"`
	Pending       int64   `json:"pending"`
	Processing    int64   `json:"processing"`
	LagSeconds    float64 `json:"lagSeconds"`
}

type queueDetailView struct {
	ID                 string                 `json:"id"`
	Name               string                 `json:"name"`
	Namespace          string                 `json:"namespace"`
	Task               string                 `json:"task"`
	CreatedAt          string                 `json:"createdAt"`
	Priority           int                    `json:"priority"`
	DedupWindowSeconds int                    `json:"dedupWindowSeconds"`
	Options            partition.QueueOptions `json:"options"`
	// Config is the part of the options Queen's status view reads
	// (maxQueueSize is maxSize).
	Config         map[string]any `json:"config"`
	PartitionCount int            `json:"partitionCount"`
	// Partitions is omitted by the status views (GET /api/v1/status/queues).
	Partitions     *[]partitionView        `json:"partitions,omitempty"`
	Totals         reginatype.MessageStats `json:"totals"`
	Messages       messageCounts           `json:"messages"`
	ConsumerGroups []groupView             `json:"consumerGroups"`
	OldestMessage  *string                 `json:"oldestMessage"`
	NewestMessage  *string                 `json:"newestMessage"`
}

func timePtr(t *time.Time) *string {
	if t == nil {
		return nil
	}
	return new(timeMillis(*t))
}

func lagSeconds(c *reginatype.ConsumerState, now time.Time) float64 {
	if c.OldestPendingAt == nil {
		return 0
	}
	return max(now.Sub(*c.OldestPendingAt).Seconds(), 0)
}

func newConsumerView(p *reginatype.PartitionDetail, c *reginatype.ConsumerState, now time.Time) consumerView {
	st := p.GroupStats(c)
	v := consumerView{ConsumerGroup: c.Group, CursorOffset: c.Cursor, Pending: st.Pending, Processing: st.Processing,
		LagSeconds: lagSeconds(c, now), OldestPendingAt: timePtr(c.OldestPendingAt), LeaseFrom: c.LeaseFrom,
		LeaseTo: c.LeaseTo, RetryCount: c.RetryCount, UpdatedAt: timeMillis(c.UpdatedAt)}
	if c.LeaseID != nil && c.LeaseLive {
		v.LeaseID = new(c.LeaseID.String())
		v.LeaseExpiresAt = timePtr(c.LeaseExpiresAt)
	}
	return v
}

func newPartitionView(p *reginatype.PartitionDetail, now time.Time) partitionView {
	v := partitionView{ID: p.ID.String(), Name: p.Name, CreatedAt: timeMillis(p.CreatedAt), NextOffset: p.NextOffset,
		OldestOffset: p.OldestOffset, Stats: p.Stats(), OldestMessage: timePtr(p.OldestAt),
		NewestMessage: timePtr(p.NewestAt), Consumers: make([]consumerView, 0, len(p.Consumers))}
	v.Messages = v.Stats
	var last *time.Time
	for i := range p.Consumers {
		c := &p.Consumers[i]
		v.Consumers = append(v.Consumers, newConsumerView(p, c, now))
		v.Cursor.TotalConsumed += min(c.Cursor, p.NextOffset)
		if last == nil || c.UpdatedAt.After(*last) {
			last = &c.UpdatedAt
		}
	}
	v.LastActivity = timePtr(last)
	return v
}

// queueAgg sums a queue's partitions.
type queueAgg struct {
	totals         reginatype.MessageStats
	groups         []groupView
	oldest, newest *time.Time
}

func aggregate(q *reginatype.QueueDetail, now time.Time) queueAgg {
	var a queueAgg
	byGroup := make(map[string]*groupView)
	for i := range q.Partitions {
		p := &q.Partitions[i]
		a.totals.Add(p.Stats())
		if p.OldestAt != nil && (a.oldest == nil || p.OldestAt.Before(*a.oldest)) {
			a.oldest = p.OldestAt
		}
		if p.NewestAt != nil && (a.newest == nil || p.NewestAt.After(*a.newest)) {
			a.newest = p.NewestAt
		}
		for j := range p.Consumers {
			c := &p.Consumers[j]
			g := byGroup[c.Group]
			if g == nil {
				g = &groupView{ConsumerGroup: c.Group}
				byGroup[c.Group] = g
			}
			st := p.GroupStats(c)
			g.Partitions++
			g.Pending += st.Pending
			g.Processing += st.Processing
			g.LagSeconds = max(g.LagSeconds, lagSeconds(c, now))
		}
	}
	a.groups = make([]groupView, 0, len(byGroup))
	for _, g := range byGroup {
		a.groups = append(a.groups, *g)
	}
	sort.Slice(a.groups, func(i, j int) bool { return a.groups[i].ConsumerGroup < a.groups[j].ConsumerGroup })
	return a
}

func newQueueDetailView(q *reginatype.QueueDetail, now time.Time, withPartitions bool) queueDetailView {
	a := aggregate(q, now)
	v := queueDetailView{ID: q.ID.String(), Name: q.Name, Namespace: q.Namespace, Task: q.Task,
		CreatedAt: timeMillis(q.CreatedAt), Priority: q.Options.Priority,
		DedupWindowSeconds: q.Options.DedupWindowSeconds, Options: q.Options,
		Config: map[string]any{"leaseTime": q.Options.LeaseTime, "retryLimit": q.Options.RetryLimit,
			"retryDelay": q.Options.RetryDelay, "ttl": q.Options.TTL, "maxQueueSize": q.Options.MaxSize,
			"deadLetterQueue": q.Options.DeadLetterQueue},
		PartitionCount: len(q.Partitions), Totals: a.totals,
		Messages: messageCounts{Total: a.totals.Total, Pending: a.totals.Pending, Processing: a.totals.Processing,
			Completed: a.totals.Completed},
		ConsumerGroups: a.groups, OldestMessage: timePtr(a.oldest), NewestMessage: timePtr(a.newest)}
	if withPartitions {
		parts := make([]partitionView, 0, len(q.Partitions))
		for i := range q.Partitions {
			parts = append(parts, newPartitionView(&q.Partitions[i], now))
		}
		v.Partitions = &parts
	}
	return v
}

// queueDetail reads one queue; found is false when it does not exist.
func (s *Server) queueDetail(ctx *fasthttp.RequestCtx, name string) (*reginatype.QueueDetail, time.Time, bool) {
	qs, now, err := s.b.Admin.QueueDetails(ctx, reginatype.QueueFilter{Name: name})
	if err != nil {
		s.writeCoreError(ctx, err)
		return nil, now, false
	}
	if len(qs) == 0 {
		writeError(ctx, fasthttp.StatusNotFound, "Queue not found")
		return nil, now, false
	}
	return &qs[0], now, true
}

// handleQueueDetail serves GET /api/v1/resources/queues/:queue: the queue
// with its partitions (offsets, stats, oldest/newest message, every group's
// cursor and lag) and totals.
func (s *Server) handleQueueDetail(ctx *fasthttp.RequestCtx, name string) {
	q, now, ok := s.queueDetail(ctx, name)
	if !ok {
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, newQueueDetailView(q, now, true))
}

// handleStatusQueue serves GET /api/v1/status/queues/:queue.
func (s *Server) handleStatusQueue(ctx *fasthttp.RequestCtx, name string) {
	q, now, ok := s.queueDetail(ctx, name)
	if !ok {
		return
	}
	v := newQueueDetailView(q, now, true)
	parts := v.Partitions
	v.Partitions = nil
	t := v.Totals
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"queue": v, "partitions": parts,
		"totals": map[string]any{"messages": t, "total": t.Total, "pending": t.Pending, "processing": t.Processing,
			"completed": t.Completed, "failed": t.Failed, "deadLetter": t.DeadLetter},
		"timestamp": timeMillis(now)})
}

func queueFilter(args *fasthttp.Args) reginatype.QueueFilter {
	ns := string(args.Peek("namespace"))
	if ns == "" {
		ns = string(args.Peek("ns"))
	}
	return reginatype.QueueFilter{Name: string(args.Peek("queue")), Namespace: ns, Task: string(args.Peek("task"))}
}

// overview is what the overview and status views count.
type overview struct {
	Queues         int                     `json:"queues"`
	Partitions     int                     `json:"partitions"`
	Namespaces     int                     `json:"namespaces"`
	Tasks          int                     `json:"tasks"`
	ConsumerGroups int                     `json:"consumerGroups"`
	Messages       reginatype.MessageStats `json:"messages"`
	Timestamp      string                  `json:"timestamp"`
}

func summarize(qs []reginatype.QueueDetail, now time.Time) overview {
	o := overview{Queues: len(qs), Timestamp: timeMillis(now)}
	ns, tasks, groups := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i := range qs {
		q := &qs[i]
		if q.Namespace != "" {
			ns[q.Namespace] = true
		}
		if q.Task != "" {
			tasks[q.Task] = true
		}
		o.Partitions += len(q.Partitions)
		for j := range q.Partitions {
			p := &q.Partitions[j]
			o.Messages.Add(p.Stats())
			for k := range p.Consumers {
				groups[p.Consumers[k].Group] = true
			}
		}
	}
	o.Namespaces, o.Tasks, o.ConsumerGroups = len(ns), len(tasks), len(groups)
	return o
}

// handleOverview serves GET /api/v1/resources/overview: counts of queues,
// partitions, namespaces, tasks and consumer groups, and queue-mode message
// totals.
func (s *Server) handleOverview(ctx *fasthttp.RequestCtx) {
	qs, now, err := s.b.Admin.QueueDetails(ctx, reginatype.QueueFilter{})
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	// Throughput and delivery lag over the last 5 minutes, from the
	// counters.
	const span = 5 * time.Minute
	pts, ok := s.series(ctx, reginatype.StatsQuery{From: now.Add(-span), To: now.Add(time.Minute)})
	if !ok {
		return
	}
	var c reginatype.StatCounters
	for i := range pts {
		c.Add(&pts[i].StatCounters)
	}
	o := summarize(qs, now)
	m := o.Messages
	m.Pending = max(m.Pending-m.Processing, 0)
	var lagAvg, lagMax any
	if c.LagCount > 0 {
		lagAvg = round2(float64(c.LagSumMs) / float64(c.LagCount) / 1000)
		lagMax = round2(float64(c.LagMaxMs) / 1000)
	}
	var offSum, offMax int64
	for i := range qs {
		t := aggregate(&qs[i], now).totals
		offSum += t.Pending
		offMax = max(offMax, t.Pending)
	}
	var offAvg any
	if len(qs) > 0 {
		offAvg = round2(float64(offSum) / float64(len(qs)))
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"queues": o.Queues, "partitions": o.Partitions, "namespaces": o.Namespaces, "tasks": o.Tasks,
		"consumerGroups": o.ConsumerGroups, "messages": m, "timestamp": o.Timestamp,
		"throughput": map[string]any{
			"ingestedPerSecond":  round2(float64(c.PushMessages) / span.Seconds()),
			"processedPerSecond": round2(float64(c.AckSuccess+c.AckFailed) / span.Seconds())},
		"lag": map[string]any{
			"time":   map[string]any{"avg": lagAvg, "max": lagMax, "median": nil, "min": nil},
			"offset": map[string]any{"avg": offAvg, "max": offMax, "median": nil, "min": nil}},
		"statsAge": s.stats.age(time.Now()),
	})
}

type groupingView struct {
	Namespace  *string                 `json:"namespace,omitempty"`
	Task       *string                 `json:"task,omitempty"`
	Queues     []string                `json:"queues"`
	Partitions int                     `json:"partitions"`
	Messages   reginatype.MessageStats `json:"messages"`
}

// grouped groups queues by key (namespace or task), skipping empty keys.
func grouped(qs []reginatype.QueueDetail, key func(*reginatype.QueueDetail) string, task bool) []groupingView {
	by := map[string]*groupingView{}
	var names []string
	for i := range qs {
		q := &qs[i]
		k := key(q)
		if k == "" {
			continue
		}
		g := by[k]
		if g == nil {
			g = &groupingView{Queues: []string{}}
			if task {
				g.Task = new(k)
			} else {
				g.Namespace = new(k)
			}
			by[k] = g
			names = append(names, k)
		}
		g.Queues = append(g.Queues, q.Name)
		g.Partitions += len(q.Partitions)
		for j := range q.Partitions {
			g.Messages.Add(q.Partitions[j].Stats())
		}
	}
	sort.Strings(names)
	out := make([]groupingView, 0, len(names))
	for _, n := range names {
		out = append(out, *by[n])
	}
	return out
}

// handleNamespaces serves GET /api/v1/resources/namespaces.
func (s *Server) handleNamespaces(ctx *fasthttp.RequestCtx) {
	qs, _, err := s.b.Admin.QueueDetails(ctx, reginatype.QueueFilter{})
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"namespaces": grouped(qs, func(q *reginatype.QueueDetail) string { return q.Namespace }, false)})
}

// handleTasks serves GET /api/v1/resources/tasks.
func (s *Server) handleTasks(ctx *fasthttp.RequestCtx) {
	qs, _, err := s.b.Admin.QueueDetails(ctx, reginatype.QueueFilter{})
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"tasks": grouped(qs, func(q *reginatype.QueueDetail) string { return q.Task }, true)})
}

// handleStatusQueues serves GET /api/v1/status/queues (queue, namespace/ns,
// task, limit (100), offset): one summary per queue, by name.
func (s *Server) handleStatusQueues(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	limit := min(max(queryInt(args, "limit", 100), 1), 10000)
	offset := max(queryInt(args, "offset", 0), 0)
	qs, now, err := s.b.Admin.QueueDetails(ctx, queueFilter(args))
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	total := len(qs)
	page := qs[min(offset, total):min(offset+limit, total)]
	out := make([]queueDetailView, 0, len(page))
	for i := range page {
		out = append(out, newQueueDetailView(&page[i], now, false))
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"queues": out, "timestamp": timeMillis(now),
		"pagination": map[string]any{"limit": limit, "offset": offset, "total": total}})
}

type messageView struct {
	ID            string          `json:"id"`
	TransactionID string          `json:"transactionId"`
	PartitionID   string          `json:"partitionId"`
	QueuePath     string          `json:"queuePath"`
	Queue         string          `json:"queue"`
	Partition     string          `json:"partition"`
	Namespace     string          `json:"namespace"`
	Task          string          `json:"task"`
	Status        string          `json:"status"`
	Offset        int64           `json:"offset"`
	TraceID       *string         `json:"traceId"`
	Data          json.RawMessage `json:"data"`
	// IsEncrypted tells whether the payload is stored encrypted (data is
	// the plaintext all the same, when the broker has the key).
	IsEncrypted bool    `json:"isEncrypted"`
	ProducerSub *string `json:"producerSub"`
	CreatedAt   string  `json:"createdAt"`
	// Mode and BusStatus describe the consumer groups with a cursor on the
	// message's partition (nil when the partition has gone).
	Mode      *modeView      `json:"mode,omitempty"`
	BusStatus *busStatusView `json:"busStatus,omitempty"`
}

// modeView is how a message's partition is consumed: HasQueueMode when
// queue mode has a cursor there, BusGroupsCount the named groups with one,
// ConsumedByGroups those whose cursor is past the message; Type is queue,
// bus, hybrid or none.
type modeView struct {
	HasQueueMode     bool   `json:"hasQueueMode"`
	BusGroupsCount   int    `json:"busGroupsCount"`
	ConsumedByGroups int    `json:"consumedByGroups"`
	Type             string `json:"type"`
}

// busStatusView counts the named groups past a message (ConsumedBy) among
// those with a cursor on its partition (TotalGroups).
type busStatusView struct {
	ConsumedBy  int `json:"consumedBy"`
	TotalGroups int `json:"totalGroups"`
}

type messageGroupView struct {
	Name           string  `json:"name"`
	Consumed       bool    `json:"consumed"`
	LeaseExpiresAt *string `json:"leaseExpiresAt"`
}

// groupsOf describes the cursors of p relative to the message at offset.
func groupsOf(p *reginatype.PartitionDetail, offset int64) (modeView, busStatusView, []messageGroupView) {
	var m modeView
	var b busStatusView
	gs := make([]messageGroupView, 0, len(p.Consumers))
	for i := range p.Consumers {
		c := &p.Consumers[i]
		consumed := offset < c.Cursor
		g := messageGroupView{Name: c.Group, Consumed: consumed}
		if c.LeaseLive {
			g.LeaseExpiresAt = timePtr(c.LeaseExpiresAt)
		}
		gs = append(gs, g)
		if c.Group == reginatype.QueueModeGroup {
			m.HasQueueMode = true
			continue
		}
		m.BusGroupsCount++
		b.TotalGroups++
		if consumed {
			m.ConsumedByGroups++
			b.ConsumedBy++
		}
	}
	m.Type = modeType(m.HasQueueMode, m.BusGroupsCount)
	return m, b, gs
}

// partitionsOf reads the partitions (with their cursors) of the queues
// named, by partition id.
func (s *Server) partitionsOf(ctx *fasthttp.RequestCtx, queues []string) (
	map[partition.UUID]*reginatype.PartitionDetail, *reginatype.QueueDetail, error) {
	out := map[partition.UUID]*reginatype.PartitionDetail{}
	var first *reginatype.QueueDetail
	seen := map[string]bool{}
	for _, name := range queues {
		if seen[name] {
			continue
		}
		seen[name] = true
		qs, _, err := s.b.Admin.QueueDetails(ctx, reginatype.QueueFilter{Name: name})
		if err != nil {
			return nil, nil, err
		}
		for i := range qs {
			if first == nil {
				first = &qs[i]
			}
			for j := range qs[i].Partitions {
				out[qs[i].Partitions[j].ID] = &qs[i].Partitions[j]
			}
		}
	}
	return out, first, nil
}

func newMessageView(m *reginatype.StoredMessage) messageView {
	v := messageView{ID: m.MessageID.String(), TransactionID: m.TransactionID, PartitionID: m.PartitionID.String(),
		QueuePath: m.Queue + "/" + m.Partition, Queue: m.Queue, Partition: m.Partition, Namespace: m.Namespace,
		Task: m.Task, Status: m.Status, Offset: m.Offset, Data: json.RawMessage(m.Payload), IsEncrypted: m.Encrypted,
		CreatedAt: timeMicros(m.Created())}
	if len(v.Data) == 0 {
		v.Data = json.RawMessage("null")
	}
	if m.HasTrace {
		v.TraceID = new(m.TraceID.String())
	}
	if m.ProducerSub != "" {
		v.ProducerSub = new(m.ProducerSub)
	}
	return v
}

// messageStatuses are the values of GET /api/v1/messages' status filter.
var messageStatuses = []string{reginatype.MessagePending, reginatype.MessageProcessing,
	reginatype.MessageCompleted, reginatype.MessageDeadLetter}

// handleListMessages serves GET /api/v1/messages (queue, partition,
// namespace/ns, task, status, from, to, limit (200, at most 1000), offset):
// stored messages with that status (all without one), newest first, each
// with its status and its partition's groups; with a queue, mode describes
// the groups reading the queue.
func (s *Server) handleListMessages(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	qf := queueFilter(args)
	f := reginatype.MessageFilter{Queue: qf.Name, Partition: string(args.Peek("partition")), Namespace: qf.Namespace,
		Task: qf.Task, Status: string(args.Peek("status")),
		Limit: min(max(queryInt(args, "limit", 200), 1), 1000), Offset: max(queryInt(args, "offset", 0), 0)}
	if f.Status != "" && !slices.Contains(messageStatuses, f.Status) {
		writeError(ctx, fasthttp.StatusBadRequest, "status must be one of "+strings.Join(messageStatuses, ", "))
		return
	}
	var err error
	if f.From, f.To, err = parseTimeRange(args); err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	list, total, err := s.b.Admin.ListMessages(ctx, f)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	names := make([]string, 0, len(list)+1)
	if f.Queue != "" {
		names = append(names, f.Queue) // first: partitionsOf returns its details
	}
	for i := range list {
		names = append(names, list[i].Queue)
	}
	parts, first, err := s.partitionsOf(ctx, names)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := make([]messageView, len(list))
	for i := range list {
		out[i] = newMessageView(&list[i])
		if p := parts[list[i].PartitionID]; p != nil {
			m, b, _ := groupsOf(p, list[i].Offset)
			out[i].Mode, out[i].BusStatus = &m, &b
		}
	}
	var mode *modeView
	if f.Queue != "" && first != nil && first.Name == f.Queue {
		mode = queueMode(first)
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"messages": out, "total": total, "mode": mode,
		"pagination": map[string]any{"limit": f.Limit, "offset": f.Offset, "total": total}})
}

// queueMode describes the groups reading a queue: whether queue mode reads
// any of its partitions, the named groups reading any, and the type
// (queue, bus, hybrid or none).
func queueMode(q *reginatype.QueueDetail) *modeView {
	var m modeView
	named := map[string]bool{}
	for i := range q.Partitions {
		for j := range q.Partitions[i].Consumers {
			if g := q.Partitions[i].Consumers[j].Group; g == reginatype.QueueModeGroup {
				m.HasQueueMode = true
			} else {
				named[g] = true
			}
		}
	}
	m.BusGroupsCount = len(named)
	m.Type = modeType(m.HasQueueMode, m.BusGroupsCount)
	return &m
}

func modeType(queueMode bool, named int) string {
	switch {
	case queueMode && named > 0:
		return "hybrid"
	case queueMode:
		return "queue"
	case named > 0:
		return "bus"
	}
	return "none"
}

// handleGetMessage serves GET /api/v1/messages/:partitionId/:transactionId.
func (s *Server) handleGetMessage(ctx *fasthttp.RequestCtx, partitionID, txID string) {
	pid, err := partition.ParseUUID(partitionID)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "partitionId must be a UUID")
		return
	}
	m, ok, err := s.b.Admin.GetMessage(ctx, pid, txID)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	if !ok {
		writeError(ctx, fasthttp.StatusNotFound, "Message not found")
		return
	}
	errMsg, retries, dead, err := s.b.Admin.DeadLetterOf(ctx, pid, m.Offset)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	parts, q, err := s.partitionsOf(ctx, []string{m.Queue})
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	v := messageDetailView{messageView: newMessageView(&m), ErrorMessage: nil, ConsumerGroups: []messageGroupView{}}
	v.Payload = v.Data
	if dead {
		v.Status = "dead_letter"
		v.ErrorMessage, v.RetryCount = &errMsg, &retries
	}
	if p := parts[pid]; p != nil {
		mv, b, gs := groupsOf(p, m.Offset)
		v.Mode, v.BusStatus, v.ConsumerGroups = &mv, &b, gs
		if c := p.Consumer(reginatype.QueueModeGroup); c != nil && c.LeaseLive {
			v.LeaseExpiresAt = timePtr(c.LeaseExpiresAt)
		}
	}
	if q != nil {
		o := q.Options
		v.QueueConfig = map[string]any{"leaseTime": o.LeaseTime, "retryLimit": o.RetryLimit,
			"retryDelay": o.RetryDelay, "ttl": o.TTL, "priority": o.Priority}
	}
	writeJSON(ctx, fasthttp.StatusOK, v)
}

// messageDetailView is one message as GET /api/v1/messages/:p/:t answers
// it: the list's fields, the payload again under Queen's name, its dead
// letter (status dead_letter, errorMessage, retryCount; null otherwise),
// queue mode's live lease, the queue's options and every group's cursor.
type messageDetailView struct {
	messageView
	Payload        json.RawMessage    `json:"payload"`
	ErrorMessage   *string            `json:"errorMessage"`
	RetryCount     *int               `json:"retryCount"`
	LeaseExpiresAt *string            `json:"leaseExpiresAt"`
	QueueConfig    map[string]any     `json:"queueConfig"`
	ConsumerGroups []messageGroupView `json:"consumerGroups"`
}

// handleDeleteMessage serves DELETE /api/v1/messages/:partitionId/:transactionId:
// 200 {"success":true,...} when a stored message was deleted, 404
// {"success":false,...,"error":"Message not found"} otherwise (upstream
// answers that one 200; Regina keeps its body and sends a real status).
func (s *Server) handleDeleteMessage(ctx *fasthttp.RequestCtx, partitionID, txID string) {
	pid, err := partition.ParseUUID(partitionID)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, "partitionId must be a UUID")
		return
	}
	n, err := s.b.Admin.DeleteMessage(ctx, pid, txID)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	if n == 0 {
		writeJSON(ctx, fasthttp.StatusNotFound, map[string]any{"success": false, "partitionId": pid.String(),
			"transactionId": txID, "message": "Message not found", "error": "Message not found"})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"success": true, "partitionId": pid.String(),
		"transactionId": txID, "message": "Message deleted", "deleted": n})
}
