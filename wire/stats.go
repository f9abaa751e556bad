package wire

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// The broker's own counters for the status and analytics views: what this
// broker served, counted in memory per (minute, queue) and written to
// queen.stats_minutes by RunStats; a process sample every second, written
// per minute to queen.system_minutes. The views read the tables, so they
// sum every broker sharing the database.

// statKey is one row of the counters: a minute (Unix seconds) and a queue
// ("" = the broker-wide row).
type statKey struct {
	minute int64
	queue  string
}

// statsAcc accumulates counters until RunStats writes them.
type statsAcc struct {
	mu      sync.Mutex
	rows    map[statKey]*reginatype.StatCounters
	sys     map[int64]*reginatype.SystemSample
	parked  map[string]int
	lastCPU struct {
		at         time.Time
		user, syst time.Duration
	}
	lastParked time.Time
	sched      schedLatency
	// lastFlush is when the counters were last written (zero: never).
	lastFlush time.Time

	// Lifetime figures for GET /metrics.
	requests, pushed rateCounter
}

func newStatsAcc() *statsAcc {
	return &statsAcc{rows: map[statKey]*reginatype.StatCounters{}, sys: map[int64]*reginatype.SystemSample{},
		parked: map[string]int{}}
}

func minuteOf(t time.Time) int64 { return t.Unix() - t.Unix()%60 }

// add runs f on the counters of queue for the current minute.
func (a *statsAcc) add(queue string, f func(c *reginatype.StatCounters)) {
	k := statKey{minute: minuteOf(time.Now()), queue: queue}
	a.mu.Lock()
	c := a.rows[k]
	if c == nil {
		c = &reginatype.StatCounters{}
		a.rows[k] = c
	}
	f(c)
	a.mu.Unlock()
}

// parkedDelta counts a long-poll pop starting (+1) or ending (-1) its wait
// on queue.
func (a *statsAcc) parkedDelta(queue string, d int) {
	a.mu.Lock()
	a.parked[queue] += d
	if a.parked[queue] <= 0 {
		delete(a.parked, queue)
	}
	a.mu.Unlock()
}

// sample records one process sample and integrates the waiting long polls
// since the previous sample.
func (a *statsAcc) sample(now time.Time, s *reginatype.SystemSample) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := minuteOf(now)
	cur := a.sys[m]
	if cur == nil {
		cur = &reginatype.SystemSample{}
		a.sys[m] = cur
	}
	cur.Merge(s)
	if !a.lastParked.IsZero() {
		dt := now.Sub(a.lastParked).Milliseconds()
		for q, n := range a.parked {
			k := statKey{minute: m, queue: q}
			c := a.rows[k]
			if c == nil {
				c = &reginatype.StatCounters{}
				a.rows[k] = c
			}
			c.ParkedMs += int64(n) * dt
		}
	}
	a.lastParked = now
}

// take removes the counters gathered so far, and returns them with every
// process sample (those of minutes before the current one are removed: the
// current minute's is written again, whole, at the next flush).
func (a *statsAcc) take(now time.Time, instance string) ([]reginatype.MinuteStats, []reginatype.SystemMinute) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rows := make([]reginatype.MinuteStats, 0, len(a.rows))
	for k, c := range a.rows {
		rows = append(rows, reginatype.MinuteStats{Minute: time.Unix(k.minute, 0).UTC(), Queue: k.queue,
			StatCounters: *c})
	}
	clear(a.rows)
	cur := minuteOf(now)
	sys := make([]reginatype.SystemMinute, 0, len(a.sys))
	for m, s := range a.sys {
		sys = append(sys, reginatype.SystemMinute{Minute: time.Unix(m, 0).UTC(), Instance: instance, Sample: *s})
		if m < cur {
			delete(a.sys, m)
		}
	}
	return rows, sys
}

// giveBack puts back counters a failed flush could not write, unless they
// are older than keep (the database has been away too long: they are
// dropped, and the number dropped returned).
func (a *statsAcc) giveBack(rows []reginatype.MinuteStats, sys []reginatype.SystemMinute, oldest time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	dropped := 0
	for i := range rows {
		r := &rows[i]
		if r.Minute.Before(oldest) {
			dropped++
			continue
		}
		k := statKey{minute: r.Minute.Unix(), queue: r.Queue}
		c := a.rows[k]
		if c == nil {
			c = &reginatype.StatCounters{}
			a.rows[k] = c
		}
		c.Add(&r.StatCounters)
	}
	for i := range sys {
		m := sys[i].Minute.Unix()
		if sys[i].Minute.Before(oldest) {
			continue
		}
		if _, ok := a.sys[m]; !ok {
			s := sys[i].Sample
			a.sys[m] = &s
		}
	}
	return dropped
}

// age is the seconds since this broker last wrote its counters, -1 when it
// has not yet.
func (a *statsAcc) age(now time.Time) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lastFlush.IsZero() {
		return -1
	}
	return int64(now.Sub(a.lastFlush).Seconds())
}

// rateCounter counts events since start and per second over the last
// minute.
type rateCounter struct {
	mu    sync.Mutex
	total uint64
	secs  [60]struct {
		sec int64
		n   uint64
	}
}

func (r *rateCounter) add(now time.Time, n uint64) {
	sec := now.Unix()
	r.mu.Lock()
	r.total += n
	s := &r.secs[sec%60]
	if s.sec != sec {
		s.sec, s.n = sec, 0
	}
	s.n += n
	r.mu.Unlock()
}

// read returns the total and the rate per second over the 60 seconds
// before the current one.
func (r *rateCounter) read(now time.Time) (total uint64, perSecond float64) {
	sec := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	var n uint64
	for _, s := range r.secs {
		if s.sec < sec && s.sec >= sec-60 {
			n += s.n
		}
	}
	return r.total, float64(n) / 60
}

// Recording, called by the handlers.

func (s *Server) countRequest() { s.stats.requests.add(time.Now(), 1) }

func (s *Server) countDBError() {
	s.stats.add("", func(c *reginatype.StatCounters) { c.DBErrors++ })
}

// countPush counts one push request's verdicts per queue.
func (s *Server) countPush(groups []*reginatype.PushGroup) {
	type qc struct{ queued, dup int64 }
	by := map[string]*qc{}
	for _, g := range groups {
		c := by[g.Queue]
		if c == nil {
			c = &qc{}
			by[g.Queue] = c
		}
		for _, r := range g.Results {
			if r.Status == partition.StatusQueued {
				c.queued++
			} else {
				c.dup++
			}
		}
	}
	for q, c := range by {
		s.stats.add(q, func(sc *reginatype.StatCounters) {
			sc.PushRequests++
			sc.PushMessages += c.queued
			sc.Duplicates += c.dup
		})
	}
	s.stats.add("", func(sc *reginatype.StatCounters) { sc.PushRequests++ })
	var total uint64
	for _, c := range by {
		total += uint64(c.queued)
	}
	s.stats.pushed.add(time.Now(), total)
}

// countPop counts one pop answer and the delivery lag of its messages.
func (s *Server) countPop(queue string, res *reginatype.PopResult) {
	now := time.Now()
	var sum, mx int64
	for i := range res.Messages {
		lag := max(now.Sub(res.Messages[i].Created()).Milliseconds(), 0)
		sum += lag
		mx = max(mx, lag)
	}
	n := int64(len(res.Messages))
	s.stats.add(queue, func(c *reginatype.StatCounters) {
		c.PopRequests++
		c.PopMessages += n
		if n == 0 {
			c.PopEmpty++
		}
		c.LagCount += n
		c.LagSumMs += sum
		c.LagMaxMs = max(c.LagMaxMs, mx)
	})
	s.stats.add("", func(c *reginatype.StatCounters) { c.PopRequests++ })
}

// countAcks counts one ack request's results per queue.
func (s *Server) countAcks(res []reginatype.AckResult) {
	by := map[string]*reginatype.StatCounters{}
	for i := range res {
		c := by[res[i].QueueName]
		if c == nil {
			c = &reginatype.StatCounters{AckRequests: 1}
			by[res[i].QueueName] = c
		}
		countAck(c, &res[i])
	}
	for q, c := range by {
		s.stats.add(q, func(sc *reginatype.StatCounters) { sc.Add(c) })
		s.metrics.AckResults(q, c.AckSuccess, c.AckFailed, c.AckRefused)
	}
	s.stats.add("", func(sc *reginatype.StatCounters) { sc.AckRequests++ })
}

// countAck counts one ack result: applied, refused (its lease had already
// been released: the message is delivered again) or failed; and whether it
// dead-lettered the message.
func countAck(c *reginatype.StatCounters, r *reginatype.AckResult) {
	switch {
	case r.Success:
		c.AckSuccess++
	case r.Refused:
		c.AckRefused++
	default:
		c.AckFailed++
	}
	if r.DLQ {
		c.DLQ++
	}
}

// countTransaction counts a committed transaction on every queue it
// touched, with its pushes and acks.
func (s *Server) countTransaction(res *reginatype.TxnResult) {
	queues := map[string]*reginatype.StatCounters{}
	at := func(q string) *reginatype.StatCounters {
		c := queues[q]
		if c == nil {
			c = &reginatype.StatCounters{Transactions: 1}
			queues[q] = c
		}
		return c
	}
	var pushed uint64
	for _, p := range res.Pushes {
		c := at(p.Queue)
		if p.Duplicate {
			c.Duplicates++
		} else {
			c.PushMessages++
			pushed++
		}
	}
	for i := range res.Acks {
		countAck(at(res.Acks[i].QueueName), &res.Acks[i])
	}
	for q, c := range queues {
		s.stats.add(q, func(sc *reginatype.StatCounters) { sc.Add(c) })
		s.metrics.AckResults(q, c.AckSuccess, c.AckFailed, c.AckRefused)
	}
	s.stats.pushed.add(time.Now(), pushed)
}

// CountRetention records messages deleted by retention on a queue: kind is
// "retention" (retentionSeconds), "completed" (completedRetentionSeconds)
// or "eviction" (maxWaitTimeSeconds). The analytics' retention view reads
// them.
func (s *Server) CountRetention(queue, kind string, messages int64) {
	if messages <= 0 {
		return
	}
	s.stats.add(queue, func(c *reginatype.StatCounters) {
		switch kind {
		case "retention":
			c.RetentionMsgs += messages
		case "completed":
			c.CompletedRetentionMsgs += messages
		case "eviction":
			c.EvictionMsgs += messages
		}
		c.RetentionRuns++
	})
}

// StatsConfig configures RunStats.
type StatsConfig struct {
	// SampleInterval is the process sampling period (default 1s).
	SampleInterval time.Duration
	// FlushInterval is how often the counters are written (default 60s).
	FlushInterval time.Duration
	// RetentionDays is how long written rows are kept (default 90).
	RetentionDays int
}

// RunStats samples the process and writes the counters until ctx is done,
// then writes what is left.
func (s *Server) RunStats(ctx context.Context, cfg StatsConfig) {
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = time.Second
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = time.Minute
	}
	if cfg.RetentionDays <= 0 {
		cfg.RetentionDays = 90
	}
	sample := time.NewTicker(cfg.SampleInterval)
	defer sample.Stop()
	flush := time.NewTicker(cfg.FlushInterval)
	defer flush.Stop()
	// The CPU times at the start, so that the first sample carries the CPU
	// of its interval too (a minute holding only a process's first sample
	// would otherwise show no CPU figure).
	if user, sys, ok := cpuTimes(); ok {
		s.stats.lastCPU.at, s.stats.lastCPU.user, s.stats.lastCPU.syst = time.Now(), user, sys
	}
	var lastPurge time.Time
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.flushStats(fctx)
			cancel()
			return
		case now := <-sample.C:
			s.sampleProcess(now)
		case now := <-flush.C:
			s.flushStats(ctx)
			if now.Sub(lastPurge) > time.Hour {
				lastPurge = now
				if err := s.b.Stats.PurgeStats(ctx, now.AddDate(0, 0, -cfg.RetentionDays)); err != nil {
					s.log.Warn().Err(err).Msg("stats: purge old rows")
				}
			}
		}
	}
}

// flushStats writes the counters gathered so far; on failure they are kept
// for the next attempt (for up to a day).
func (s *Server) flushStats(ctx context.Context) {
	now := time.Now()
	rows, sys := s.stats.take(now, s.instance)
	if len(rows) == 0 && len(sys) == 0 {
		return
	}
	if err := s.b.Stats.RecordStats(ctx, s.instance, rows, sys); err != nil {
		dropped := s.stats.giveBack(rows, sys, now.Add(-24*time.Hour))
		s.log.Warn().Err(err).Int("dropped_rows", dropped).Msg("stats: write counters")
		return
	}
	s.stats.mu.Lock()
	s.stats.lastFlush = now
	s.stats.mu.Unlock()
}

// sampleProcess records one process sample: CPU since the previous one,
// memory, the pool and the push pipeline.
func (s *Server) sampleProcess(now time.Time) {
	var smp reginatype.SystemSample
	if user, sys, ok := cpuTimes(); ok {
		last := &s.stats.lastCPU
		if !last.at.IsZero() {
			if wall := now.Sub(last.at); wall > 0 {
				// Percent of one core, times 100 (Queen's unit).
				smp.CPUUser.Observe(float64(user-last.user) / float64(wall) * 10000)
				smp.CPUSystem.Observe(float64(sys-last.syst) / float64(wall) * 10000)
			}
		}
		last.at, last.user, last.syst = now, user, sys
	}
	if rss, ok := readRSS(); ok {
		smp.RSSBytes.Observe(float64(rss))
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp.HeapBytes.Observe(float64(ms.HeapAlloc))
	smp.Goroutines.Observe(float64(runtime.NumGoroutine()))
	st := s.metrics.Snapshot()
	smp.PoolSize.Observe(float64(st.Pool.Total))
	smp.PoolIdle.Observe(float64(st.Pool.Idle))
	smp.PoolActive.Observe(float64(st.Pool.Acquired))
	smp.PoolMax.Observe(float64(st.Pool.Max))
	smp.MailboxDepth.Observe(float64(st.MailboxDepth))
	smp.MailboxPeak.Observe(float64(s.b.Pipeline.MailboxPeak()))
	smp.Actors.Observe(float64(st.Actors))
	if mean, p99, ok := s.stats.sched.read(); ok {
		smp.SchedLatencyMs.Observe(mean)
		smp.SchedLatencyP99Ms.Observe(p99)
	}
	s.stats.sample(now, &smp)
}

// readRSS returns the process's resident memory in bytes (Linux
// /proc/self/statm); false elsewhere.
func readRSS() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

// cpuTimes returns the process's user and system CPU time.
func cpuTimes() (user, sys time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), true
}
