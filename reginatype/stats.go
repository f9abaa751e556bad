package reginatype

import "time"

// StatCounters are what one broker counted for one queue (or, for the
// broker-wide row, for requests whatever their queue) during one minute.
// They feed the status and analytics views (queen.stats_minutes).
type StatCounters struct {
	// PushRequests counts push requests (a push touching two queues counts
	// once on each queue's row, once on the broker-wide row); PushMessages
	// the items answered queued, Duplicates those answered duplicate.
	PushRequests, PushMessages, Duplicates int64
	// PopRequests counts pops answered (empty or not), PopMessages the
	// messages they delivered, PopEmpty the pops that delivered none.
	PopRequests, PopMessages, PopEmpty int64
	// AckRequests counts ack requests (single, batch, and the acks of a
	// transaction); AckSuccess the acks applied, AckFailed those that could
	// not be applied (unknown message, unresolvable id, an expired or
	// replaced lease), AckRefused those refused because their lease had
	// already been released (an earlier failed or retried ack of the batch,
	// or a seek: the message is delivered again); DLQ the acks that moved a
	// message to the dead-letter queue.
	AckRequests, AckSuccess, AckFailed, DLQ int64
	// Transactions counts committed transactions touching the queue.
	Transactions int64
	// LagCount, LagSumMs and LagMaxMs describe delivery lag (delivery time
	// minus the message's stored time), one measurement per delivered
	// message.
	LagCount, LagSumMs, LagMaxMs int64
	// DBErrors counts requests answered with a database error (5xx).
	DBErrors int64
	// ParkedMs is the time integral of the long-poll pops waiting on the
	// queue, in pop-milliseconds (two pops waiting for a whole minute:
	// 120000), sampled every second: divided by a span it gives the
	// average number of waiting pops over it.
	ParkedMs int64
	// RetentionMsgs, CompletedRetentionMsgs and EvictionMsgs count messages
	// deleted by retention (retentionSeconds), completed retention
	// (completedRetentionSeconds) and maxWaitTimeSeconds eviction.
	RetentionMsgs, CompletedRetentionMsgs, EvictionMsgs int64
	// RetentionRuns counts the retention or eviction runs that deleted
	// something on the queue.
	RetentionRuns int64
	// AckRefused: see AckRequests.
	AckRefused int64
}

// Add adds o to c (sums, and the maximum of the lag maxima).
func (c *StatCounters) Add(o *StatCounters) {
	c.PushRequests += o.PushRequests
	c.PushMessages += o.PushMessages
	c.Duplicates += o.Duplicates
	c.PopRequests += o.PopRequests
	c.PopMessages += o.PopMessages
	c.PopEmpty += o.PopEmpty
	c.AckRequests += o.AckRequests
	c.AckSuccess += o.AckSuccess
	c.AckFailed += o.AckFailed
	c.DLQ += o.DLQ
	c.Transactions += o.Transactions
	c.LagCount += o.LagCount
	c.LagSumMs += o.LagSumMs
	c.LagMaxMs = max(c.LagMaxMs, o.LagMaxMs)
	c.DBErrors += o.DBErrors
	c.ParkedMs += o.ParkedMs
	c.RetentionMsgs += o.RetentionMsgs
	c.CompletedRetentionMsgs += o.CompletedRetentionMsgs
	c.EvictionMsgs += o.EvictionMsgs
	c.RetentionRuns += o.RetentionRuns
	c.AckRefused += o.AckRefused
}

// MinuteStats is one row of queen.stats_minutes: one broker's counters for
// one queue ("" = the broker-wide row) in the minute starting at Minute.
type MinuteStats struct {
	Minute time.Time
	Queue  string
	StatCounters
}

// Leaf is one sampled figure over a minute (or a bucket of minutes): the
// average, minimum, maximum and last sample, and how many samples.
type Leaf struct {
	Avg   float64 `json:"avg"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Last  float64 `json:"last"`
	Count int64   `json:"count"`
}

// Observe adds one sample.
func (l *Leaf) Observe(v float64) {
	if l.Count == 0 {
		l.Min, l.Max = v, v
	}
	l.Avg = (l.Avg*float64(l.Count) + v) / float64(l.Count+1)
	l.Min, l.Max, l.Last = min(l.Min, v), max(l.Max, v), v
	l.Count++
}

// Merge adds a later leaf o (its Last wins; averages weighted by count).
func (l *Leaf) Merge(o Leaf) {
	if o.Count == 0 {
		return
	}
	if l.Count == 0 {
		*l = o
		return
	}
	l.Avg = (l.Avg*float64(l.Count) + o.Avg*float64(o.Count)) / float64(l.Count+o.Count)
	l.Min, l.Max, l.Last = min(l.Min, o.Min), max(l.Max, o.Max), o.Last
	l.Count += o.Count
}

// SystemSample is what one broker process looked like over one minute,
// sampled every second: CPU (percent of one core, times 100, as Queen
// reports it), memory, the database pool, and the push pipeline.
type SystemSample struct {
	CPUUser   Leaf `json:"cpuUser"`
	CPUSystem Leaf `json:"cpuSystem"`
	RSSBytes  Leaf `json:"rssBytes"`
	HeapBytes Leaf `json:"heapBytes"`
	// PoolSize, PoolIdle and PoolActive are the connection pool's open,
	// idle and acquired connections.
	PoolSize   Leaf `json:"poolSize"`
	PoolIdle   Leaf `json:"poolIdle"`
	PoolActive Leaf `json:"poolActive"`
	// PoolMax is the pool's limit; Goroutines the process's goroutines;
	// MailboxDepth the items waiting in the actors' mailboxes; Actors the
	// running partition actors.
	PoolMax      Leaf `json:"poolMax"`
	Goroutines   Leaf `json:"goroutines"`
	MailboxDepth Leaf `json:"mailboxDepth"`
	Actors       Leaf `json:"actors"`
	// MailboxPeak is, each second, the most items waiting in the mailboxes
	// at any instant of that second (MailboxDepth is the depth at the
	// sampling instant).
	MailboxPeak Leaf `json:"mailboxPeak"`
	// SchedLatencyMs and SchedLatencyP99Ms are, each second, the mean and
	// the 99th percentile of the Go scheduler's latency over that second
	// (runtime/metrics /sched/latencies:seconds: how long goroutines that
	// were ready to run waited for a thread), in milliseconds.
	SchedLatencyMs    Leaf `json:"schedLatencyMs"`
	SchedLatencyP99Ms Leaf `json:"schedLatencyP99Ms"`
}

// Merge merges a later sample into s.
func (s *SystemSample) Merge(o *SystemSample) {
	s.CPUUser.Merge(o.CPUUser)
	s.CPUSystem.Merge(o.CPUSystem)
	s.RSSBytes.Merge(o.RSSBytes)
	s.HeapBytes.Merge(o.HeapBytes)
	s.PoolSize.Merge(o.PoolSize)
	s.PoolIdle.Merge(o.PoolIdle)
	s.PoolActive.Merge(o.PoolActive)
	s.PoolMax.Merge(o.PoolMax)
	s.Goroutines.Merge(o.Goroutines)
	s.MailboxDepth.Merge(o.MailboxDepth)
	s.Actors.Merge(o.Actors)
	s.MailboxPeak.Merge(o.MailboxPeak)
	s.SchedLatencyMs.Merge(o.SchedLatencyMs)
	s.SchedLatencyP99Ms.Merge(o.SchedLatencyP99Ms)
}

// SystemMinute is one row of queen.system_minutes.
type SystemMinute struct {
	Minute   time.Time
	Instance string
	Sample   SystemSample
}

// StatsQuery selects rows of queen.stats_minutes in [From, To), summed per
// Bucket (aligned to midnight UTC; 0: one bucket, dated From).
type StatsQuery struct {
	From, To time.Time
	Bucket   time.Duration
	// Broker selects the broker-wide rows; otherwise the queue rows,
	// filtered by Queue, Namespace and Task (zero: no filter).
	Broker                 bool
	Queue, Namespace, Task string
	// ByQueue keeps one point per (bucket, queue) instead of per bucket;
	// ByInstance one per (bucket, instance).
	ByQueue, ByInstance bool
}

// StatsPoint is one bucket of StatsQuery's answer.
type StatsPoint struct {
	Bucket time.Time
	// Queue and Instance are set when the query grouped by them.
	Queue, Instance string
	StatCounters
}

// LeaseSummary describes the live leases now.
type LeaseSummary struct {
	// Active counts (partition, group) cursors holding a live lease;
	// Partitions the distinct partitions among them; BatchSize the
	// messages leased by them, Acked the part of those already acknowledged.
	Active, Partitions, BatchSize, Acked int64
}

// DLQSummary describes the dead-letter queue now.
type DLQSummary struct {
	Total, Partitions int64
	TopErrors         []ErrorCount
}

// ErrorCount is one error text and how many dead letters carry it.
type ErrorCount struct {
	Error string `json:"error"`
	Count int64  `json:"count"`
}

// BucketCount is a count of one queue in one bucket.
type BucketCount struct {
	Bucket time.Time
	Queue  string
	Count  int64
}
