package wire

import (
	"errors"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/reginatype"
)

// The status and analytics time series (GET /api/v1/status,
// /api/v1/analytics/*): sums of the per-minute counters every broker writes
// (queen.stats_minutes, queen.system_minutes), read for a bounded time
// range. Figures Regina has no notion of are answered null (see
// docs/api.md, "Status and analytics").

// bucketFormat is the time series' bucket key: UTC, seconds, no fraction.
const bucketFormat = "2006-01-02T15:04:05Z"

func bucketTime(t time.Time) string { return t.UTC().Format(bucketFormat) }

// bucketMinutes is the bucket size for a window, as Queen sizes it.
func bucketMinutes(window time.Duration) int {
	switch {
	case window <= time.Hour:
		return 1
	case window <= 6*time.Hour:
		return 5
	case window <= 24*time.Hour:
		return 15
	case window <= 7*24*time.Hour:
		return 60
	}
	return 360
}

// statsWindow reads from and to (RFC 3339; default: the def before now,
// and now) and sizes the buckets.
func statsWindow(args *fasthttp.Args, def time.Duration) (from, to time.Time, bucket int, err error) {
	if from, to, err = parseTimeRange(args); err != nil {
		return
	}
	if to.IsZero() {
		to = time.Now()
	}
	if from.IsZero() {
		from = to.Add(-def)
	}
	if !from.Before(to) {
		err = errors.New("from must be before to")
		return
	}
	return from, to, bucketMinutes(to.Sub(from)), nil
}

func timeRangeView(from, to time.Time) map[string]any {
	return map[string]any{"from": timeMillis(from), "to": timeMillis(to)}
}

// perSecond is n per second over a bucket of minutes, 2 decimals.
func perSecond(n int64, minutes int) float64 { return round2(float64(n) / float64(minutes*60)) }

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// avgLag is the delivery-weighted average lag in ms; nil when nothing was
// delivered.
func avgLag(c *reginatype.StatCounters) any {
	if c.LagCount == 0 {
		return nil
	}
	return round2(float64(c.LagSumMs) / float64(c.LagCount))
}

func maxLag(c *reginatype.StatCounters) any {
	if c.LagCount == 0 {
		return nil
	}
	return c.LagMaxMs
}

// series reads the counters of q; on error it answers and returns false.
func (s *Server) series(ctx *fasthttp.RequestCtx, q reginatype.StatsQuery) ([]reginatype.StatsPoint, bool) {
	pts, err := s.b.Stats.StatsSeries(ctx, q)
	if err != nil {
		s.writeCoreError(ctx, err)
		return nil, false
	}
	return pts, true
}

// systemBuckets merges the process samples per bucket: per broker (key
// instance) and over all brokers (key "").
type systemBucket struct {
	perInstance map[string]*reginatype.SystemSample
}

func (s *Server) systemByBucket(ctx *fasthttp.RequestCtx, from, to time.Time,
	bucket time.Duration) (map[int64]*systemBucket, bool) {
	mins, err := s.b.Stats.SystemSamples(ctx, from, to)
	if err != nil {
		s.writeCoreError(ctx, err)
		return nil, false
	}
	out := map[int64]*systemBucket{}
	for i := range mins {
		m := &mins[i]
		b := m.Minute.Truncate(bucket).Unix()
		sb := out[b]
		if sb == nil {
			sb = &systemBucket{perInstance: map[string]*reginatype.SystemSample{}}
			out[b] = sb
		}
		cur := sb.perInstance[m.Instance]
		if cur == nil {
			cur = &reginatype.SystemSample{}
			sb.perInstance[m.Instance] = cur
		}
		cur.Merge(&m.Sample)
	}
	return out, true
}

// avgOver averages a leaf's average over the brokers of a bucket (nil when
// no broker sampled it).
func (b *systemBucket) avgOver(f func(*reginatype.SystemSample) reginatype.Leaf, scale float64) any {
	if b == nil {
		return nil
	}
	var sum float64
	n := 0
	for _, smp := range b.perInstance {
		if l := f(smp); l.Count > 0 {
			sum += l.Avg
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return round2(sum / float64(n) * scale)
}

// minFreeSlots is the fewest idle-or-unopened pool connections any broker
// had in the bucket (pool limit minus the most acquired).
func (b *systemBucket) minFreeSlots() any {
	if b == nil {
		return nil
	}
	var out any
	best := math.MaxFloat64
	for _, smp := range b.perInstance {
		if smp.PoolMax.Count == 0 {
			continue
		}
		free := smp.PoolMax.Last - smp.PoolActive.Max
		if free < best {
			best, out = free, free
		}
	}
	return out
}

// handleStatus serves GET /api/v1/status (from, to: default the last hour;
// queue, namespace/ns, task filter the counts): the throughput series, the
// current message counts, live leases, the dead-letter queue, the brokers,
// and Regina's runtime figures.
func (s *Server) handleStatus(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	from, to, bm, err := statsWindow(args, time.Hour)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	f := queueFilter(args)
	filtered := f.Name != "" || f.Namespace != "" || f.Task != ""
	qs, now, err := s.b.Admin.QueueDetails(ctx, f)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	bucket := time.Duration(bm) * time.Minute
	queuePts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: bucket, Queue: f.Name,
		Namespace: f.Namespace, Task: f.Task})
	if !ok {
		return
	}
	brokerPts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: bucket, Broker: true})
	if !ok {
		return
	}
	sys, ok := s.systemByBucket(ctx, from, to, bucket)
	if !ok {
		return
	}
	leases, err := s.b.Stats.Leases(ctx)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	topErrors, err := s.b.Stats.TopDLQErrors(ctx, from, to, 10)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	workers, ok := s.workers(ctx, now, 2*time.Minute)
	if !ok {
		return
	}

	brokerAt := map[int64]*reginatype.StatCounters{}
	var brokerTotal reginatype.StatCounters
	for i := range brokerPts {
		brokerAt[brokerPts[i].Bucket.Unix()] = &brokerPts[i].StatCounters
		brokerTotal.Add(&brokerPts[i].StatCounters)
	}
	var queueTotal reginatype.StatCounters
	throughput := make([]map[string]any, 0, len(queuePts))
	buckets := map[int64]bool{}
	for i := range queuePts {
		buckets[queuePts[i].Bucket.Unix()] = true
		queueTotal.Add(&queuePts[i].StatCounters)
	}
	for k := range brokerAt {
		buckets[k] = true
	}
	for k := range sys { // a broker ran: a zero bucket when nothing was served
		buckets[k] = true
	}
	keys := make([]int64, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] > keys[j] }) // newest first
	queueAt := map[int64]*reginatype.StatCounters{}
	for i := range queuePts {
		queueAt[queuePts[i].Bucket.Unix()] = &queuePts[i].StatCounters
	}
	for _, k := range keys {
		c := queueAt[k]
		if c == nil {
			c = &reginatype.StatCounters{}
		}
		bc := brokerAt[k]
		if bc == nil {
			bc = &reginatype.StatCounters{}
		}
		sb := sys[k]
		processed := c.AckSuccess + c.AckFailed
		throughput = append(throughput, map[string]any{
			"timestamp": bucketTime(time.Unix(k, 0)), "ingested": c.PushMessages, "processed": processed,
			"popMessages": c.PopMessages, "ingestedPerSecond": perSecond(c.PushMessages, bm),
			"processedPerSecond": perSecond(processed, bm), "popPerSecond": perSecond(c.PopMessages, bm),
			"avgLagMs": avgLag(c), "maxLagMs": maxLag(c),
			"avgEventLoopLagMs": sb.avgOver(schedMean, 1), "maxEventLoopLagMs": sb.maxOf(schedP99),
			"minFreeSlots": sb.minFreeSlots(),
			"dbErrors":     bc.DBErrors, "ackFailed": c.AckFailed, "ackRefused": c.AckRefused, "dlqCount": c.DLQ,
			"queenCpuUserPct": sb.avgOver(func(x *reginatype.SystemSample) reginatype.Leaf { return x.CPUUser }, 0.01),
			"queenCpuSysPct":  sb.avgOver(func(x *reginatype.SystemSample) reginatype.Leaf { return x.CPUSystem }, 0.01),
			"queenRssMb":      sb.avgOver(func(x *reginatype.SystemSample) reginatype.Leaf { return x.RSSBytes }, 1.0/(1<<20)),
			"dbPoolActive":    sb.avgOver(func(x *reginatype.SystemSample) reginatype.Leaf { return x.PoolActive }, 1),
			"dbPoolIdle":      sb.avgOver(func(x *reginatype.SystemSample) reginatype.Leaf { return x.PoolIdle }, 1),
			"dbPoolSize":      sb.avgOver(func(x *reginatype.SystemSample) reginatype.Leaf { return x.PoolSize }, 1),
		})
	}

	o := summarize(qs, now)
	queues := make([]map[string]any, 0, len(qs))
	affected := 0
	for i := range qs {
		q := &qs[i]
		a := aggregate(q, now)
		for j := range q.Partitions {
			if q.Partitions[j].DeadLetters > 0 {
				affected++
			}
		}
		if a.totals.Total == 0 {
			continue
		}
		queues = append(queues, map[string]any{"id": q.ID.String(), "name": q.Name, "namespace": q.Namespace,
			"task": q.Task, "partitions": len(q.Partitions), "totalConsumed": a.totals.Completed})
	}
	req := &brokerTotal
	if filtered {
		req = &queueTotal
	}
	st := s.metrics.Snapshot()
	ps := &st.Pool
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{
		"timeRange": timeRangeView(from, to), "bucketMinutes": bm, "pointCount": len(throughput),
		"throughput": throughput, "queues": queues,
		"messages": map[string]any{"total": o.Messages.Total, "pending": o.Messages.Pending,
			"processing": o.Messages.Processing, "completed": o.Messages.Completed, "failed": o.Messages.Failed,
			"deadLetter": o.Messages.DeadLetter,
			"requests":   map[string]any{"push": req.PushRequests, "pop": req.PopRequests, "ack": req.AckRequests},
			"batchEfficiency": map[string]any{
				"push": ratio(queueTotal.PushMessages, req.PushRequests),
				"pop":  ratio(queueTotal.PopMessages, req.PopRequests),
				"ack":  ratio(queueTotal.AckSuccess+queueTotal.AckFailed, req.AckRequests)}},
		"leases": map[string]any{"active": leases.Active, "partitionsWithLeases": leases.Partitions,
			"totalBatchSize": leases.BatchSize, "totalAcked": leases.Acked},
		"deadLetterQueue": map[string]any{"totalMessages": o.Messages.DeadLetter, "affectedPartitions": affected,
			"topErrors": topErrors},
		"workers": workers,
		"errors": map[string]any{"dbErrors": brokerTotal.DBErrors, "ackFailed": queueTotal.AckFailed,
			"ackRefused": queueTotal.AckRefused, "dlqMessages": queueTotal.DLQ},
		"statsAge": s.stats.age(time.Now()),
		// Regina's own figures.
		"timestamp": o.Timestamp, "uptimeSeconds": int64(time.Since(s.started).Seconds()),
		"server": "Regina", "version": Version,
		"database": map[string]any{"status": "connected",
			"pool": map[string]any{"total": ps.Total, "idle": ps.Idle, "acquired": ps.Acquired, "max": ps.Max}},
		"broker": map[string]any{"actors": st.Actors, "mailboxDepth": st.MailboxDepth, "batches": st.Batches,
			"queued": st.Queued, "duplicates": st.Duplicates, "mailboxFull": st.MailboxFull,
			"pushFailures": st.PushFailures},
		"queueCount": o.Queues, "partitions": o.Partitions, "namespaces": o.Namespaces, "tasks": o.Tasks,
		"consumerGroups": o.ConsumerGroups,
	})
}

func ratio(n, d int64) any {
	if d == 0 {
		return nil
	}
	return round2(float64(n) / float64(d))
}

// workers describes every broker that wrote a sample in the last span:
// pool and pipeline figures from its samples, messages pushed and acked
// from its counters.
func (s *Server) workers(ctx *fasthttp.RequestCtx, now time.Time, span time.Duration) ([]map[string]any, bool) {
	from := now.Add(-span).Truncate(time.Minute)
	to := now.Add(time.Minute)
	mins, err := s.b.Stats.SystemSamples(ctx, from, to)
	if err != nil {
		s.writeCoreError(ctx, err)
		return nil, false
	}
	pts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, ByInstance: true})
	if !ok {
		return nil, false
	}
	processed := map[string]int64{}
	for i := range pts {
		processed[pts[i].Instance] += pts[i].PushMessages + pts[i].AckSuccess + pts[i].AckFailed
	}
	per := map[string]*reginatype.SystemSample{}
	last := map[string]time.Time{}
	var names []string
	for i := range mins {
		m := &mins[i]
		cur := per[m.Instance]
		if cur == nil {
			cur = &reginatype.SystemSample{}
			per[m.Instance] = cur
			names = append(names, m.Instance)
		}
		cur.Merge(&m.Sample)
		if m.Minute.After(last[m.Instance]) {
			last[m.Instance] = m.Minute
		}
	}
	sort.Strings(names)
	out := make([]map[string]any, 0, len(names))
	for i, n := range names {
		smp := per[n]
		out = append(out, map[string]any{"hostname": n, "workerId": i,
			"avgEventLoopLagMs": leafAvg(schedMean(smp)), "maxEventLoopLagMs": leafMax(schedP99(smp)),
			"freeSlots": smp.PoolMax.Last - smp.PoolActive.Max, "dbConnections": smp.PoolActive.Max,
			"jobQueueSize": max(smp.MailboxPeak.Max, smp.MailboxDepth.Max), "backoffSize": nil,
			"messagesProcessed": processed[n], "lastSeen": bucketTime(last[n])})
	}
	return out, true
}

// handleQueueOps serves GET /api/v1/analytics/queue-ops (from, to, queue):
// one row per (bucket, queue), oldest first, for every queue served or
// given a partition in the range (and the queue asked for, when it
// exists), in every bucket where some broker ran: zeros where nothing was
// served.
func (s *Server) handleQueueOps(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	from, to, bm, err := statsWindow(args, time.Hour)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	queue := string(args.Peek("queue"))
	bucket := time.Duration(bm) * time.Minute
	pts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: bucket, Queue: queue, ByQueue: true})
	if !ok {
		return
	}
	created, err := s.b.Stats.PartitionsCreated(ctx, from, to, bucket, queue)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	sampled, err := s.b.Stats.SampledBuckets(ctx, from, to, bucket)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	type key struct {
		b int64
		q string
	}
	served := map[key]*reginatype.StatCounters{}
	made := map[key]int64{}
	buckets := map[int64]bool{}
	names := map[string]bool{}
	for i := range pts {
		k := key{pts[i].Bucket.Unix(), pts[i].Queue}
		served[k] = &pts[i].StatCounters
		buckets[k.b], names[k.q] = true, true
	}
	for _, c := range created {
		k := key{c.Bucket.Unix(), c.Queue}
		made[k] = c.Count
		buckets[k.b], names[k.q] = true, true
	}
	for _, b := range sampled {
		buckets[b.Unix()] = true
	}
	if queue != "" {
		names[queue] = true // kept below only if it has partitions
	}
	queues := make([]string, 0, len(names))
	for q := range names {
		queues = append(queues, q)
	}
	before, err := s.b.Stats.PartitionsBefore(ctx, from, queues)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	if _, ok := before[queue]; queue != "" && !ok && len(pts) == 0 && len(created) == 0 {
		queues = queues[:0] // an unknown queue (or one without partitions) and nothing served
	}
	sort.Strings(queues)
	keys := sortedKeys(buckets)
	series := make([]map[string]any, 0, len(keys)*len(queues))
	count := before // partitions so far, per queue
	for _, b := range keys {
		for _, q := range queues {
			k := key{b, q}
			c := served[k]
			if c == nil {
				c = &reginatype.StatCounters{}
			}
			count[q] += made[k]
			series = append(series, queueOpsRow(time.Unix(b, 0), q, c, made[k], count[q], bm))
		}
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"timeRange": timeRangeView(from, to), "bucketMinutes": bm,
		"queues": queues, "series": series})
}

// sortedKeys returns the keys of set in ascending order.
func sortedKeys(set map[int64]bool) []int64 {
	keys := make([]int64, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func queueOpsRow(b time.Time, queue string, c *reginatype.StatCounters, created, partitions int64,
	bm int) map[string]any {
	var count any
	if partitions > 0 {
		count = partitions
	}
	return map[string]any{"bucket": bucketTime(b), "queueName": queue,
		"pushRequests": c.PushRequests, "pushMessages": c.PushMessages, "popMessages": c.PopMessages,
		"popEmpty": c.PopEmpty, "ackRequests": c.AckRequests, "ackSuccess": c.AckSuccess, "ackFailed": c.AckFailed,
		"ackRefused": c.AckRefused, "transactions": c.Transactions, "partitionsCreated": created,
		"partitionsDeleted": nil, "partitionCount": count, "avgLagMs": avgLag(c), "maxLagMs": maxLag(c),
		"pushPerSecond": perSecond(c.PushMessages, bm), "popPerSecond": perSecond(c.PopMessages, bm),
		"ackPerSecond": perSecond(c.AckSuccess+c.AckFailed, bm), "emptyPerSecond": perSecond(c.PopEmpty, bm),
		"parkedCount": round2(float64(c.ParkedMs) / float64(bm*60000))}
}

// handleQueueLag serves GET /api/v1/analytics/queue-lag (from, to, queue):
// a bare array, one row per (minute, queue) with deliveries, newest first.
func (s *Server) handleQueueLag(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	from, to, _, err := statsWindow(args, time.Hour)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	pts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: time.Minute,
		Queue: string(args.Peek("queue")), ByQueue: true})
	if !ok {
		return
	}
	out := make([]map[string]any, 0, len(pts))
	for i := len(pts) - 1; i >= 0; i-- {
		p := &pts[i]
		if p.PopMessages == 0 {
			continue
		}
		out = append(out, map[string]any{"queueName": p.Queue, "bucketTime": bucketTime(p.Bucket),
			"popCount": p.PopMessages, "avgLagMs": avgLag(&p.StatCounters), "maxLagMs": maxLag(&p.StatCounters)})
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// handleWorkerMetrics serves GET /api/v1/analytics/worker-metrics (from,
// to): the broker-wide series (newest first), the brokers of the last 5
// minutes, per-queue delivery lag and lifetime sums of what is kept.
func (s *Server) handleWorkerMetrics(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	from, to, bm, err := statsWindow(args, time.Hour)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	bucket := time.Duration(bm) * time.Minute
	qpts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: bucket})
	if !ok {
		return
	}
	bpts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: bucket, Broker: true})
	if !ok {
		return
	}
	sys, ok := s.systemByBucket(ctx, from, to, bucket)
	if !ok {
		return
	}
	byQueue, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, ByQueue: true})
	if !ok {
		return
	}
	workers, ok := s.workers(ctx, time.Now(), 5*time.Minute)
	if !ok {
		return
	}
	at := map[int64][2]*reginatype.StatCounters{}
	for i := range qpts {
		v := at[qpts[i].Bucket.Unix()]
		v[0] = &qpts[i].StatCounters
		at[qpts[i].Bucket.Unix()] = v
	}
	for i := range bpts {
		v := at[bpts[i].Bucket.Unix()]
		v[1] = &bpts[i].StatCounters
		at[bpts[i].Bucket.Unix()] = v
	}
	for k := range sys { // a broker ran: a zero bucket when nothing was served
		if _, ok := at[k]; !ok {
			at[k] = [2]*reginatype.StatCounters{}
		}
	}
	keys := make([]int64, 0, len(at))
	for k := range at {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] > keys[j] })
	var sum, bsum reginatype.StatCounters
	ts := make([]map[string]any, 0, len(keys))
	for _, k := range keys {
		q, b := at[k][0], at[k][1]
		if q == nil {
			q = &reginatype.StatCounters{}
		}
		if b == nil {
			b = &reginatype.StatCounters{}
		}
		sum.Add(q)
		bsum.Add(b)
		sb := sys[k]
		acks := q.AckSuccess + q.AckFailed
		ts = append(ts, map[string]any{"timestamp": bucketTime(time.Unix(k, 0)),
			"pushMessages": q.PushMessages, "popMessages": q.PopMessages, "ackMessages": acks,
			"pushRequests": b.PushRequests, "popRequests": b.PopRequests, "ackRequests": b.AckRequests,
			"jobsDone": nil, "pushPerSecond": perSecond(q.PushMessages, bm), "popPerSecond": perSecond(q.PopMessages, bm),
			"ackPerSecond": perSecond(acks, bm), "avgEventLoopLagMs": sb.avgOver(schedMean, 1),
			"maxEventLoopLagMs": sb.maxOf(schedP99), "avgFreeSlots": sb.avgFree(), "minFreeSlots": sb.minFreeSlots(),
			"dbConnections":   sb.avgOver(func(x *reginatype.SystemSample) reginatype.Leaf { return x.PoolActive }, 1),
			"avgJobQueueSize": sb.avgOver(func(x *reginatype.SystemSample) reginatype.Leaf { return x.MailboxDepth }, 1),
			"maxJobQueueSize": sb.maxOf(jobQueuePeak),
			"backoffSize":     round2(float64(q.ParkedMs) / float64(bm*60000)),
			"avgLagMs":        avgLag(q), "maxLagMs": maxLag(q), "lagCount": q.LagCount, "dbErrors": b.DBErrors,
			"ackSuccess": q.AckSuccess, "ackFailed": q.AckFailed, "ackRefused": q.AckRefused, "dlqCount": q.DLQ})
	}
	queues := make([]map[string]any, 0, len(byQueue))
	sort.SliceStable(byQueue, func(i, j int) bool { return byQueue[i].PopMessages > byQueue[j].PopMessages })
	for i := range byQueue {
		p := &byQueue[i]
		queues = append(queues, map[string]any{"queueName": p.Queue, "popCount": p.PopMessages,
			"avgLagMs": avgLag(&p.StatCounters), "maxLagMs": maxLag(&p.StatCounters)})
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"timeRange": timeRangeView(from, to), "bucketMinutes": bm,
		"pointCount": len(ts), "timeSeries": ts, "workers": workers, "queues": queues,
		// Over the time range (Regina keeps no separate lifetime sums; the
		// rows are kept METRICS_RETENTION_DAYS).
		"summary": map[string]any{"totalPushMessages": sum.PushMessages, "totalPopMessages": sum.PopMessages,
			"totalAckMessages": sum.AckSuccess + sum.AckFailed, "totalPushRequests": bsum.PushRequests,
			"totalPopRequests": bsum.PopRequests, "totalAckRequests": bsum.AckRequests,
			"totalDbErrors": bsum.DBErrors, "totalAckFailed": sum.AckFailed, "totalAckRefused": sum.AckRefused,
			"totalDlq":        sum.DLQ,
			"pendingMessages": sum.PushMessages - sum.PopMessages}})
}

func (b *systemBucket) avgFree() any {
	if b == nil {
		return nil
	}
	var sum float64
	n := 0
	for _, smp := range b.perInstance {
		if smp.PoolMax.Count > 0 {
			sum += smp.PoolMax.Avg - smp.PoolActive.Avg
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return round2(sum / float64(n))
}

func (b *systemBucket) maxOf(f func(*reginatype.SystemSample) reginatype.Leaf) any {
	if b == nil {
		return nil
	}
	var out any
	best := math.Inf(-1)
	for _, smp := range b.perInstance {
		if l := f(smp); l.Count > 0 && l.Max > best {
			best, out = l.Max, round2(l.Max)
		}
	}
	return out
}

// The event-loop figures: the Go scheduler's latency, per second (see
// reginatype.SystemSample).
func schedMean(x *reginatype.SystemSample) reginatype.Leaf { return x.SchedLatencyMs }
func schedP99(x *reginatype.SystemSample) reginatype.Leaf  { return x.SchedLatencyP99Ms }

// jobQueuePeak is the job-queue figure's maximum: the most pushes waiting
// in the mailboxes at any instant (samples written before the peak was
// kept have only the depth at each sampling instant).
func jobQueuePeak(x *reginatype.SystemSample) reginatype.Leaf {
	if x.MailboxPeak.Count > 0 {
		return x.MailboxPeak
	}
	return x.MailboxDepth
}

// leafAvg and leafMax are a leaf's average and maximum, nil without
// samples.
func leafAvg(l reginatype.Leaf) any {
	if l.Count == 0 {
		return nil
	}
	return round2(l.Avg)
}

func leafMax(l reginatype.Leaf) any {
	if l.Count == 0 {
		return nil
	}
	return round2(l.Max)
}

// handleRetentionAnalytics serves GET /api/v1/analytics/retention (from,
// to, queue): messages deleted per bucket by kind, oldest first.
func (s *Server) handleRetentionAnalytics(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	from, to, bm, err := statsWindow(args, time.Hour)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	pts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: time.Duration(bm) * time.Minute,
		Queue: string(args.Peek("queue"))})
	if !ok {
		return
	}
	row := func(c *reginatype.StatCounters) map[string]any {
		return map[string]any{"retentionMsgs": c.RetentionMsgs, "completedRetentionMsgs": c.CompletedRetentionMsgs,
			"evictionMsgs": c.EvictionMsgs, "totalMsgs": c.RetentionMsgs + c.CompletedRetentionMsgs + c.EvictionMsgs,
			"eventCount": c.RetentionRuns}
	}
	var total reginatype.StatCounters
	series := make([]map[string]any, 0, len(pts))
	for i := range pts {
		c := &pts[i].StatCounters
		if c.RetentionRuns == 0 {
			continue
		}
		total.Add(c)
		r := row(c)
		r["bucket"] = bucketTime(pts[i].Bucket)
		series = append(series, r)
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"timeRange": timeRangeView(from, to), "bucketMinutes": bm,
		"series": series, "totals": row(&total)})
}

// handleParkedReplicas serves GET /api/v1/analytics/queue-parked-replicas
// (from, to, queue): the average long-poll pops waiting per (bucket, queue,
// broker), oldest first.
func (s *Server) handleParkedReplicas(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	from, to, bm, err := statsWindow(args, time.Hour)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	pts, ok := s.series(ctx, reginatype.StatsQuery{From: from, To: to, Bucket: time.Duration(bm) * time.Minute,
		Queue: string(args.Peek("queue")), ByQueue: true, ByInstance: true})
	if !ok {
		return
	}
	ids := map[string]int{}
	replicas := []map[string]any{}
	series := make([]map[string]any, 0, len(pts))
	for i := range pts {
		p := &pts[i]
		if p.ParkedMs == 0 {
			continue
		}
		if _, ok := ids[p.Instance]; !ok {
			ids[p.Instance] = len(ids)
			replicas = append(replicas, map[string]any{"hostname": p.Instance, "workerId": ids[p.Instance]})
		}
		series = append(series, map[string]any{"bucket": bucketTime(p.Bucket), "queueName": p.Queue,
			"hostname": p.Instance, "workerId": ids[p.Instance],
			"parkedCount": round2(float64(p.ParkedMs) / float64(bm*60000))})
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"timeRange": timeRangeView(from, to), "bucketMinutes": bm,
		"series": series, "replicas": replicas})
}

func leafView(l reginatype.Leaf) map[string]any {
	if l.Count == 0 {
		return map[string]any{"avg": nil, "min": nil, "max": nil, "last": nil}
	}
	return map[string]any{"avg": round2(l.Avg), "min": round2(l.Min), "max": round2(l.Max), "last": round2(l.Last)}
}

// handleSystemMetrics serves GET /api/v1/analytics/system-metrics (from,
// to, hostname): every broker's process samples per bucket, oldest first.
func (s *Server) handleSystemMetrics(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	from, to, bm, err := statsWindow(args, time.Hour)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	host := string(args.Peek("hostname"))
	bucket := time.Duration(bm) * time.Minute
	mins, err := s.b.Stats.SystemSamples(ctx, from, to)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	type acc struct {
		b   int64
		smp reginatype.SystemSample
	}
	per := map[string][]*acc{}
	var names []string
	for i := range mins {
		m := &mins[i]
		if host != "" && m.Instance != host {
			continue
		}
		list, ok := per[m.Instance]
		if !ok {
			names = append(names, m.Instance)
		}
		b := m.Minute.Truncate(bucket).Unix()
		if len(list) == 0 || list[len(list)-1].b != b {
			list = append(list, &acc{b: b})
		}
		list[len(list)-1].smp.Merge(&m.Sample)
		per[m.Instance] = list
	}
	sort.Strings(names)
	points := 0
	replicas := make([]map[string]any, 0, len(names))
	for _, n := range names {
		ts := make([]map[string]any, 0, len(per[n]))
		for _, a := range per[n] {
			x := &a.smp
			ts = append(ts, map[string]any{"timestamp": timeMillis(time.Unix(a.b, 0)),
				"sampleCount": x.PoolSize.Count,
				"metrics": map[string]any{
					"cpu":    map[string]any{"user_us": leafView(x.CPUUser), "system_us": leafView(x.CPUSystem)},
					"memory": map[string]any{"rss_bytes": leafView(x.RSSBytes), "heap_bytes": leafView(x.HeapBytes)},
					"database": map[string]any{"pool_size": leafView(x.PoolSize), "pool_idle": leafView(x.PoolIdle),
						"pool_active": leafView(x.PoolActive), "pool_max": leafView(x.PoolMax)},
					"threadpool": map[string]any{
						"db":     map[string]any{"pool_size": leafView(x.PoolMax), "queue_size": leafView(x.MailboxDepth)},
						"system": map[string]any{"pool_size": leafView(x.Goroutines), "queue_size": leafView(reginatype.Leaf{})}},
					"actors":     leafView(x.Actors),
					"registries": map[string]any{"response": map[string]any{}},
				}})
		}
		points += len(ts)
		replicas = append(replicas, map[string]any{"hostname": n, "port": portOf(n), "workerId": n, "timeSeries": ts})
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"timeRange": timeRangeView(from, to), "bucketMinutes": bm,
		"pointCount": points, "replicaCount": len(replicas), "replicas": replicas})
}

// portOf is the port of an instance name (host:port), nil without one.
func portOf(instance string) any {
	for i := len(instance) - 1; i >= 0; i-- {
		if instance[i] == ':' {
			n := 0
			for _, c := range instance[i+1:] {
				if c < '0' || c > '9' {
					return nil
				}
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return nil
}

// handlePostgresStats serves GET /api/v1/analytics/postgres-stats.
func (s *Server) handlePostgresStats(ctx *fasthttp.RequestCtx) {
	st, err := s.b.Stats.PostgresStats(ctx)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, st)
}

// handleStatusAnalytics serves GET /api/v1/status/analytics (from, to:
// default the last 24 hours; interval minute, hour (default) or day;
// queue, namespace, task): messages pushed per interval, zero-filled.
func (s *Server) handleStatusAnalytics(ctx *fasthttp.RequestCtx) {
	args := ctx.QueryArgs()
	from, to, _, err := statsWindow(args, 24*time.Hour)
	if err != nil {
		writeError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	interval := string(args.Peek("interval"))
	var step time.Duration
	switch interval {
	case "", "hour":
		interval, step = "hour", time.Hour
	case "minute":
		step = time.Minute
	case "day":
		step = 24 * time.Hour
	default:
		writeError(ctx, fasthttp.StatusBadRequest, "interval must be minute, hour or day")
		return
	}
	if to.Sub(from)/step > 10000 {
		writeError(ctx, fasthttp.StatusBadRequest, "from..to holds more than 10000 intervals")
		return
	}
	f := queueFilter(args)
	start := from.UTC().Truncate(step)
	pts, ok := s.series(ctx, reginatype.StatsQuery{From: start, To: to, Bucket: step, Queue: f.Name,
		Namespace: f.Namespace, Task: f.Task})
	if !ok {
		return
	}
	by := map[int64]int64{}
	for i := range pts {
		by[pts[i].Bucket.Unix()] = pts[i].PushMessages
	}
	points := []map[string]any{}
	for t := start; !t.After(to); t = t.Add(step) {
		points = append(points, map[string]any{"timestamp": timeMillis(t), "messages": by[t.Unix()]})
	}
	writeJSON(ctx, fasthttp.StatusOK, map[string]any{"dataPoints": points, "interval": interval,
		"from": timeMillis(from), "to": timeMillis(to)})
}
