package metrics

import (
	"bufio"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
)

// ContentType is the media type WriteText produces (the Prometheus text
// exposition format, version 0.0.4).
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// OtherQueue is the queue label of every queue beyond Config.MaxQueueLabels.
// It cannot be confused with a real queue named "other".
const OtherQueue = "__other__"

// DefaultMaxQueueLabels is the number of distinct queues that get a label
// value of their own when Config.MaxQueueLabels is 0.
const DefaultMaxQueueLabels = 1000

// Verdict label values of regina_dedup_verdicts_total. Each pushed item is
// counted once: a duplicate whose original id is the zero UUID (its segment
// was removed by retention) is duplicate_unknown_original, not duplicate.
const (
	VerdictQueued                   = "queued"
	VerdictDuplicate                = "duplicate"
	VerdictDuplicateUnknownOriginal = "duplicate_unknown_original"
	// VerdictConflict: a repeat with a different payload on a queue with
	// dedupPayloadCheck reject.
	VerdictConflict = "conflict"
)

// Config configures a Metrics.
type Config struct {
	// MaxQueueLabels bounds the distinct queue label values: the first this
	// many queues seen get their own, the rest are OtherQueue (default 1000).
	MaxQueueLabels int
}

// Buckets of the histograms.
var (
	// BatchItemsBuckets: items per push transaction (BATCH_MAX_ITEMS is 1000
	// by default).
	BatchItemsBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000}
	// LatencyBuckets: push transactions and HTTP requests (long polls last up
	// to their timeout, hence the tail).
	LatencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// RetryAgeBuckets: seconds between an original and its duplicate, from
	// sub-second client retries to a week, so that a window can be sized
	// from the data whatever it is now (the default window is 3600).
	RetryAgeBuckets = []float64{0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600,
		7200, 14400, 43200, 86400, 172800, 604800}
)

// Metrics holds every metric of one broker.
type Metrics struct {
	reg    *prometheus.Registry
	queues queueLabels

	httpRequests *prometheus.CounterVec
	httpSeconds  *prometheus.HistogramVec
	batchItems   prometheus.Histogram
	pushSeconds  prometheus.Histogram
	verdicts     *prometheus.CounterVec
	mismatches   *prometheus.CounterVec
	retryAge     *prometheus.HistogramVec
	unresolvable *prometheus.CounterVec
	ackResults   *prometheus.CounterVec
	retention    *prometheus.CounterVec
	retPasses    *prometheus.CounterVec
	undelivered  prometheus.Counter
	connRefused  *prometheus.CounterVec
	bodyBudget   prometheus.Counter
	connsOpen    prometheus.Gauge

	bound  sync.Map // queue label -> *Queue
	source atomic.Pointer[func() Snapshot]
}

// New returns a Metrics with its own registry, holding the Go runtime and
// process collectors and every regina_* family.
func New(cfg Config) *Metrics {
	if cfg.MaxQueueLabels <= 0 {
		cfg.MaxQueueLabels = DefaultMaxQueueLabels
	}
	m := &Metrics{
		reg:    prometheus.NewRegistry(),
		queues: queueLabels{max: cfg.MaxQueueLabels, known: make(map[string]struct{})},
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "regina_http_requests_total",
			Help: "HTTP requests served, by route template, method and status code.",
		}, []string{"route", "method", "code"}),
		httpSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "regina_http_request_duration_seconds",
			Help:    "HTTP request latency by route template and method (long polls included).",
			Buckets: LatencyBuckets,
		}, []string{"route", "method"}),
		batchItems: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "regina_push_batch_items",
			Help:    "Items per push transaction (group commit of one partition's mailbox).",
			Buckets: BatchItemsBuckets,
		}),
		pushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "regina_push_transaction_duration_seconds",
			Help:    "Latency of one push transaction (queen.push_segment round trip), every attempt.",
			Buckets: LatencyBuckets,
		}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "regina_dedup_verdicts_total",
			Help: "Pushed items by queue and verdict: queued, duplicate, duplicate_unknown_original " +
				"(a duplicate whose original's segment is gone, answered with the zero UUID), conflict " +
				"(a repeat with a different payload, dedupPayloadCheck reject).",
		}, []string{"queue", "verdict"}),
		mismatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "regina_dedup_payload_mismatch_total",
			Help: "Repeats of a transaction id whose payload differs from the original's (queues with " +
				"dedupPayloadCheck report or reject), by queue.",
		}, []string{"queue"}),
		retryAge: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "regina_dedup_retry_age_seconds",
			Help: "Time from an original's stored creation to a duplicate of it found in the window, " +
				"by queue. Size dedupWindowSeconds from its upper quantiles.",
			Buckets: RetryAgeBuckets,
		}, []string{"queue"}),
		unresolvable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "regina_ack_unresolvable_total",
			Help: "Acks answered \"unresolvable\" (transaction id no longer in the hash sidecar), by queue.",
		}, []string{"queue"}),
		ackResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "regina_ack_results_total",
			Help: "Ack items by queue and result: success (applied), failed (not applied: unknown " +
				"message, unresolvable id, an expired or replaced lease), refused (its lease had already been " +
				"released by an earlier failed or retried ack of the batch, or a seek: the message is " +
				"delivered again).",
		}, []string{"queue", "result"}),
		retention: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "regina_retention_deleted_rows_total",
			Help: "Rows deleted by retention: log_txns (hash sidecar) and segments (messages).",
		}, []string{"table"}),
		retPasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "regina_retention_passes_total",
			Help: "Retention passes, by result (ok, error).",
		}, []string{"result"}),
		undelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "regina_pop_undelivered_total",
			Help: "Pop answers that did not reach their client (gone before the answer was written, or the " +
				"write failed): their lease was released at once and no autoAck was applied.",
		}),
		connRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "regina_connections_refused_total",
			Help: "Connections closed as soon as accepted, by reason (max_connections, max_connections_per_ip), " +
				"and failed accepts (accept_error: too many open files and the like; the listener backs off).",
		}, []string{"reason"}),
		bodyBudget: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "regina_http_body_budget_full_total",
			Help: "Requests answered 503 because their body found no room in MAX_BODY_BYTES_IN_FLIGHT within the read timeout.",
		}),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "regina_connections_open",
			Help: "Client connections open on the API port (each holds a file descriptor).",
		}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.httpRequests, m.httpSeconds, m.batchItems, m.pushSeconds, m.verdicts, m.mismatches, m.retryAge,
		m.unresolvable, m.ackResults, m.retention, m.retPasses, m.undelivered, m.connRefused, m.connsOpen, m.bodyBudget,
		&snapshotCollector{m: m},
	)
	for _, t := range []string{"log_txns", "segments"} {
		m.retention.WithLabelValues(t)
	}
	for _, r := range []string{"ok", "error"} {
		m.retPasses.WithLabelValues(r)
	}
	for _, r := range []string{ConnMaxConnections, ConnMaxPerIP, ConnAcceptError} {
		m.connRefused.WithLabelValues(r)
	}
	return m
}

// Reason label values of regina_connections_refused_total.
const (
	ConnMaxConnections = "max_connections"
	ConnMaxPerIP       = "max_connections_per_ip"
	ConnAcceptError    = "accept_error"
)

// PopUndelivered counts one pop answer that did not reach its client.
func (m *Metrics) PopUndelivered() { m.undelivered.Inc() }

// ConnectionRefused counts one connection closed at accept, or one failed
// accept, by reason (ConnMaxConnections, ConnMaxPerIP, ConnAcceptError).
func (m *Metrics) ConnectionRefused(reason string) { m.connRefused.WithLabelValues(reason).Inc() }

// BodyBudgetFull counts a request refused for want of room in the budget
// of body bytes in flight.
func (m *Metrics) BodyBudgetFull() { m.bodyBudget.Inc() }

// ConnectionsOpen adds delta (1 accepted, -1 closed) to the open
// connections.
func (m *Metrics) ConnectionsOpen(delta int) { m.connsOpen.Add(float64(delta)) }

// Registry returns the registry holding every metric.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// WriteText gathers every metric and writes it in the text exposition format
// (ContentType).
func (m *Metrics) WriteText(w io.Writer) error {
	mfs, err := m.reg.Gather()
	bw := bufio.NewWriter(w)
	for _, mf := range mfs {
		if _, werr := expfmt.MetricFamilyToText(bw, mf); werr != nil {
			return werr
		}
	}
	if ferr := bw.Flush(); ferr != nil {
		return ferr
	}
	return err
}

// QueueLabel returns the label value of queue: its name for the first
// MaxQueueLabels queues seen, OtherQueue for the rest.
func (m *Metrics) QueueLabel(queue string) string { return m.queues.label(queue) }

// ObserveHTTP records one HTTP request. route must be a template from a
// fixed set, never a raw path.
func (m *Metrics) ObserveHTTP(route, method string, code int, d time.Duration) {
	m.httpRequests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	m.httpSeconds.WithLabelValues(route, method).Observe(d.Seconds())
}

// ObservePushTransaction records the latency of one push transaction.
func (m *Metrics) ObservePushTransaction(d time.Duration) { m.pushSeconds.Observe(d.Seconds()) }

// ObserveBatch records the number of items of one push transaction.
func (m *Metrics) ObserveBatch(items int) { m.batchItems.Observe(float64(items)) }

// UnresolvableAck counts one ack answered "unresolvable" on queue.
func (m *Metrics) UnresolvableAck(queue string) {
	m.unresolvable.WithLabelValues(m.queues.label(queue)).Inc()
}

// Result label values of regina_ack_results_total.
const (
	AckSuccess = "success"
	AckFailed  = "failed"
	AckRefused = "refused"
)

// AckResults adds the ack items of one request on queue by result.
func (m *Metrics) AckResults(queue string, success, failed, refused int64) {
	l := m.queues.label(queue)
	for _, r := range []struct {
		result string
		n      int64
	}{{AckSuccess, success}, {AckFailed, failed}, {AckRefused, refused}} {
		if r.n > 0 {
			m.ackResults.WithLabelValues(l, r.result).Add(float64(r.n))
		}
	}
}

// ObserveRetention records one retention pass: the rows it deleted (also
// when it failed part way) and whether it failed.
func (m *Metrics) ObserveRetention(logTxns, segments int64, failed bool) {
	if logTxns > 0 {
		m.retention.WithLabelValues("log_txns").Add(float64(logTxns))
	}
	if segments > 0 {
		m.retention.WithLabelValues("segments").Add(float64(segments))
	}
	if failed {
		m.retPasses.WithLabelValues("error").Inc()
	} else {
		m.retPasses.WithLabelValues("ok").Inc()
	}
}

// Queue is the push-path metrics of one queue, bound once so that recording
// does not look labels up. Actors keep one.
type Queue struct {
	queued, dup, dupUnknown prometheus.Counter
	conflict, mismatch      prometheus.Counter
	retryAge                prometheus.Observer
}

// ForQueue returns the per-queue push metrics of queue (those of OtherQueue
// beyond the label cap), bound once and cached.
func (m *Metrics) ForQueue(queue string) *Queue {
	l := m.queues.label(queue)
	if q, ok := m.bound.Load(l); ok {
		return q.(*Queue) //nolint:forcetypeassert // bound holds only *Queue
	}
	q, _ := m.bound.LoadOrStore(l, &Queue{
		queued:     m.verdicts.WithLabelValues(l, VerdictQueued),
		dup:        m.verdicts.WithLabelValues(l, VerdictDuplicate),
		dupUnknown: m.verdicts.WithLabelValues(l, VerdictDuplicateUnknownOriginal),
		conflict:   m.verdicts.WithLabelValues(l, VerdictConflict),
		mismatch:   m.mismatches.WithLabelValues(l),
		retryAge:   m.retryAge.WithLabelValues(l),
	})
	return q.(*Queue) //nolint:forcetypeassert // bound holds only *Queue
}

// Verdicts adds the verdicts of one batch.
func (q *Queue) Verdicts(queued, duplicate, unknownOriginal int) {
	if queued > 0 {
		q.queued.Add(float64(queued))
	}
	if duplicate > 0 {
		q.dup.Add(float64(duplicate))
	}
	if unknownOriginal > 0 {
		q.dupUnknown.Add(float64(unknownOriginal))
	}
}

// Conflicts adds the conflict verdicts of one batch.
func (q *Queue) Conflicts(n int) {
	if n > 0 {
		q.conflict.Add(float64(n))
	}
}

// PayloadMismatches adds repeats whose payload differed from the original's.
func (q *Queue) PayloadMismatches(n int) {
	if n > 0 {
		q.mismatch.Add(float64(n))
	}
}

// ObserveRetryAge records the age of the original a duplicate collided with.
func (q *Queue) ObserveRetryAge(d time.Duration) { q.retryAge.Observe(max(d.Seconds(), 0)) }

// queueLabels hands out queue label values, at most max distinct names.
type queueLabels struct {
	mu    sync.RWMutex
	max   int
	known map[string]struct{}
}

func (q *queueLabels) label(name string) string {
	q.mu.RLock()
	_, ok := q.known[name]
	full := len(q.known) >= q.max
	q.mu.RUnlock()
	if ok {
		return name
	}
	if full {
		return OtherQueue
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.known[name]; ok {
		return name
	}
	if len(q.known) >= q.max {
		return OtherQueue
	}
	q.known[name] = struct{}{}
	return name
}

// Snapshot is what the broker reports at scrape time (gauges, and counters
// kept elsewhere): the push pipeline's figures (package actor), the
// connection pool's and the dedup cache's. The broker installs its source
// (SetSource); the JSON views (/metrics, /api/v1/status) read it too.
type Snapshot struct {
	Actors       int
	MailboxDepth int
	MailboxFull  uint64
	PushFailures uint64
	// Batches counts push transactions; Queued and Duplicates the items
	// answered queued and duplicate.
	Batches, Queued, Duplicates uint64
	// Withdrawn and Abandoned count the push groups whose caller stopped
	// waiting: before their batch started (nothing written) and after.
	Withdrawn, Abandoned uint64
	Packed               PackedSnapshot
	ReadOnly             ReadOnlySnapshot
	Pool                 PoolSnapshot
	Cache                CacheSnapshot
}

// PackedSnapshot is the push packer: its round trips to PostgreSQL and the
// partition batches they carried (Batches / RoundTrips is the packing).
type PackedSnapshot struct {
	RoundTrips, Batches uint64
}

// ReadOnlySnapshot is the read-only duplicate path: the batches it answered
// all-duplicate without the row lock, by how they were proven (ByOriginals:
// reading the segments the dedup cache named, packed with other partitions'
// batches; ByWindowProbe: a window probe of their own), and the batches that
// tried it and took the locked transaction after all (Misses).
type ReadOnlySnapshot struct {
	ByOriginals, ByWindowProbe, Misses uint64
}

// PoolSnapshot is the PostgreSQL connection pool.
type PoolSnapshot struct {
	Total, Idle, Acquired, Max int32
	// EmptyAcquires counts acquires that found no idle connection and waited.
	EmptyAcquires int64
}

// CacheSnapshot is the dedup cache (see package cache, Stats).
type CacheSnapshot struct {
	// Hits counts watermark probes (the cache vouched for the partition);
	// SentinelsByReason the full-window probes by the cache's reason.
	Hits, Found       uint64
	Sentinels         uint64
	SentinelsByReason map[string]uint64
	Bytes, Budget     int64
	Hashes            int64
	// FilterHashes is how many of Hashes are held in Bloom filters (the
	// older part of deep windows), FilterBytes their memory (part of
	// Bytes); ColdHits the watermarks a filter lowered.
	FilterHashes, FilterBytes int64
	ColdHits                  uint64
	Partitions                int
	Hydrating                 int
	Tombstones                int
	TooBig                    int
	Evictions                 uint64
	// Hydrations by result: started, finished, failed, aborted, truncated,
	// busy (not started: too many running).
	Hydrations        map[string]uint64
	HydrationsRunning int
}

// SetSource installs the function called at every scrape for the Snapshot
// families. Without one they are not reported.
func (m *Metrics) SetSource(f func() Snapshot) { m.source.Store(&f) }

// Snapshot calls the installed source; the zero Snapshot without one.
func (m *Metrics) Snapshot() Snapshot {
	if f := m.source.Load(); f != nil {
		return (*f)()
	}
	return Snapshot{}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descActors       = desc("regina_actors", "Live partition actors.")
	descMailbox      = desc("regina_mailbox_depth_items", "Items waiting in all partition mailboxes.")
	descMailboxFull  = desc("regina_mailbox_full_total", "Push groups refused with 503 because a mailbox was full.")
	descPushFailures = desc("regina_push_failures_total", "Push batches that failed (their items got a 5xx or a failed status).")
	descWithdrawn    = desc("regina_push_withdrawn_total",
		"Push groups dropped from a mailbox because their client disconnected before their batch started (nothing written).")
	descAbandoned = desc("regina_push_abandoned_total",
		"Push groups whose client disconnected after their batch started (the verdict stands; it was not delivered).")
	descPackTrips = desc("regina_push_packed_round_trips_total",
		"Round trips of the push packer (PUSH_SHAPE packed or pipelined): each carries the ready batches of one or more partitions.")
	descPackBatches = desc("regina_push_packed_batches_total",
		"Partition batches the push packer carried (divided by regina_push_packed_round_trips_total: batches per round trip).")
	descReadOnly = desc("regina_push_readonly_batches_total",
		"Push batches answered all-duplicate by the read-only path (no row lock, no transaction id, no WAL), by proof "+
			"(originals: the segments the dedup cache named, read with other partitions' batches in one statement; "+
			"window_probe: a window probe of the batch's own).", "proof")
	descReadOnlyMiss = desc("regina_push_readonly_misses_total",
		"Push batches expected to be all duplicates that the read-only path did not prove (they took the locked transaction).")
	descPoolConns = desc("regina_db_pool_connections", "PostgreSQL pool connections by state.", "state")
	descPoolMax   = desc("regina_db_pool_max_connections", "PostgreSQL pool size (DB_POOL_SIZE).")
	descPoolWaits = desc("regina_db_pool_empty_acquires_total", "Pool acquires that found no idle connection and had to wait.")
	descProbes    = desc("regina_dedup_probes_total",
		"Push probes by path (watermark: the cache vouched for the partition, the probe scans only "+
			"segments above it; full_window: the whole window through the GIN index) and cause "+
			"(cache_hit, or the cache's reason for the sentinel).", "path", "cause")
	descFound      = desc("regina_dedup_cache_found_total", "Batch hashes the cache held when computing a watermark (likely duplicates).")
	descCacheBytes = desc("regina_dedup_cache_bytes", "Estimated memory held by the dedup cache.")
	descBudget     = desc("regina_dedup_cache_budget_bytes", "The dedup cache's budget (QUEEN_DEDUP_CACHE_MB).")
	descHashes     = desc("regina_dedup_cache_hashes", "Hashes held by the dedup cache.")
	descFilterHash = desc("regina_dedup_cache_filter_hashes", "Hashes the dedup cache holds in Bloom filters (the older part of windows deeper than its exact tier), part of regina_dedup_cache_hashes.")
	descFilterByte = desc("regina_dedup_cache_filter_bytes", "Memory of the dedup cache's Bloom filters, part of regina_dedup_cache_bytes.")
	descColdHits   = desc("regina_dedup_cache_filter_hits_total", "Watermarks lowered because a batch hash may be in a partition's Bloom filters (a repeat of an older id, or a false positive).")
	descCacheParts = desc("regina_dedup_cache_partitions", "Partitions in the dedup cache by state.", "state")
	descEvictions  = desc("regina_dedup_cache_evictions_total", "Partitions evicted from the dedup cache to stay within its budget.")
	descHydrations = desc("regina_dedup_cache_hydrations_total", "Background loads of partitions into the dedup cache, by result.", "result")
	descHydRunning = desc("regina_dedup_cache_hydrations_running", "Background loads in flight.")
)

// snapshotCollector reports the Snapshot families at scrape time.
type snapshotCollector struct{ m *Metrics }

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActors, descMailbox, descMailboxFull, descPushFailures, descWithdrawn, descAbandoned,
		descPackTrips, descPackBatches, descReadOnly, descReadOnlyMiss, descPoolConns,
		descPoolMax, descPoolWaits, descProbes, descFound, descCacheBytes, descBudget, descHashes, descFilterHash, descFilterByte, descColdHits, descCacheParts,
		descEvictions, descHydrations, descHydRunning} {
		ch <- d
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.m.source.Load()
	if f == nil {
		return
	}
	s := (*f)()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descActors, float64(s.Actors))
	gauge(descMailbox, float64(s.MailboxDepth))
	counter(descMailboxFull, float64(s.MailboxFull))
	counter(descPushFailures, float64(s.PushFailures))
	counter(descWithdrawn, float64(s.Withdrawn))
	counter(descAbandoned, float64(s.Abandoned))
	counter(descPackTrips, float64(s.Packed.RoundTrips))
	counter(descPackBatches, float64(s.Packed.Batches))
	counter(descReadOnly, float64(s.ReadOnly.ByOriginals), "originals")
	counter(descReadOnly, float64(s.ReadOnly.ByWindowProbe), "window_probe")
	counter(descReadOnlyMiss, float64(s.ReadOnly.Misses))

	p := &s.Pool
	gauge(descPoolConns, float64(p.Idle), "idle")
	gauge(descPoolConns, float64(p.Acquired), "acquired")
	gauge(descPoolConns, float64(max(p.Total-p.Idle-p.Acquired, 0)), "constructing")
	gauge(descPoolMax, float64(p.Max))
	counter(descPoolWaits, float64(p.EmptyAcquires))

	cs := &s.Cache
	counter(descProbes, float64(cs.Hits), "watermark", "cache_hit")
	for reason, n := range cs.SentinelsByReason {
		counter(descProbes, float64(n), "full_window", reason)
	}
	counter(descFound, float64(cs.Found))
	gauge(descCacheBytes, float64(cs.Bytes))
	gauge(descBudget, float64(cs.Budget))
	gauge(descHashes, float64(cs.Hashes))
	gauge(descFilterHash, float64(cs.FilterHashes))
	gauge(descFilterByte, float64(cs.FilterBytes))
	counter(descColdHits, float64(cs.ColdHits))
	gauge(descCacheParts, float64(cs.Partitions), "known")
	gauge(descCacheParts, float64(cs.Hydrating), "hydrating")
	gauge(descCacheParts, float64(cs.Tombstones), "tombstone")
	gauge(descCacheParts, float64(cs.TooBig), "too_big")
	counter(descEvictions, float64(cs.Evictions))
	for result, n := range cs.Hydrations {
		counter(descHydrations, float64(n), result)
	}
	gauge(descHydRunning, float64(cs.HydrationsRunning))
}
