package actor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/internal/crypt"
	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Store is what the push pipeline needs from the database (package sqlstore
// implements it).
type Store interface {
	// EnsurePartition resolves (creating when missing) a queue's partition.
	EnsurePartition(ctx context.Context, queue, partition string) (reginatype.PartitionRef, error)
	// Push runs one batch's push transaction.
	Push(ctx context.Context, b *reginatype.PushBatch) (reginatype.PushResult, error)
	// PushMany runs the push transactions of several partitions' batches
	// in one round trip with the given shape, each batch getting Push's
	// outcome in res[i] and errs[i] (the read-only duplicate path aside).
	PushMany(ctx context.Context, shape reginatype.PushShape, bs []*reginatype.PushBatch,
		res []reginatype.PushResult, errs []error)
	// SidecarDepth estimates the hashes in a partition's window, so that a
	// cache load that could not fit the budget is not started.
	SidecarDepth(ctx context.Context, p partition.UUID) (int64, error)
	// StreamHydrations reads, in one snapshot, what the dedup cache needs
	// to vouch for each of the partitions ps: their heads (allocator,
	// window, the snapshot's now(); Missing when gone), then every
	// log_txns row in their windows, in no order, to row (hashes valid
	// during the call only). An error from heads or row is returned as it
	// is.
	StreamHydrations(ctx context.Context, ps []partition.UUID, heads func([]reginatype.Hydration) error,
		row func(i int, first int64, createdAt time.Time, hashes [][16]byte) error) error
	// RecentPartitions lists up to limit partitions pushed to inside their
	// queue's window, the most recent first (the cache loads them at start).
	RecentPartitions(ctx context.Context, limit int) ([]partition.UUID, error)
	// Epoch numbers the database servers seen; it moves on when the server
	// changed (a failover), before anything runs on the new one. What the
	// cache learned under another epoch is dropped.
	Epoch() uint64
}

// Config bounds the actors. Zero fields take their defaults.
type Config struct {
	// NoUnlockedDuplicates turns the read-only duplicate fast path off:
	// every batch takes the locked push transaction (tests compare the two).
	NoUnlockedDuplicates bool
	// MailboxMaxItems bounds the items waiting in one partition's mailbox
	// (default 10000). A group that would cross it is refused with
	// reginatype.ErrMailboxFull, unless the mailbox is empty (a single large
	// push is always accepted; the HTTP body limit bounds it).
	MailboxMaxItems int
	// MailboxMaxBytes bounds the payload bytes waiting in one mailbox
	// (default 64 MiB), with the same rule.
	MailboxMaxBytes int
	// BatchMaxItems bounds the items of one push transaction (default 1000);
	// whole groups are taken, at least one.
	BatchMaxItems int
	// BatchMaxBytes bounds the payload bytes of one push transaction
	// (default 8 MiB), with the same rule.
	BatchMaxBytes int
	// PushShape is how ready batches of several partitions travel to
	// PostgreSQL (default ShapeOneTransaction: packed). ShapeSingle sends
	// each batch alone, as its actor's own transaction.
	PushShape reginatype.PushShape
	// PackSenders bounds the packed transactions in flight at once (default
	// 4): a batch that becomes ready while they all run waits for the next
	// one, with the other batches that became ready meanwhile.
	PackSenders int
	// PackMaxBatches bounds the partitions of one packed transaction
	// (default 32).
	PackMaxBatches int
	// PackWait is how long a sender waits for more batches before it sends
	// fewer than PackMaxBatches (default 0: it never waits, so a lone batch
	// goes at once).
	PackWait time.Duration
	// IdleTimeout retires an actor whose mailbox stayed empty this long
	// (default 30s).
	IdleTimeout time.Duration
	// ActorsSoftLimit bounds the live actors, so that memory does not grow
	// with the partitions written in the last IdleTimeout (default 10000;
	// an idle actor costs about 6 KiB, mostly its goroutine's stack): while
	// more are live, an actor whose mailbox empties retires after
	// BusyIdleTimeout instead. Pushes are never refused for it.
	ActorsSoftLimit int
	// BusyIdleTimeout is the idle timeout while more than ActorsSoftLimit
	// actors are live (default 1s, at most IdleTimeout).
	BusyIdleTimeout time.Duration
	// Logger receives the actors' logs.
	Logger zerolog.Logger

	// Cache is the in-window hash cache that lowers the push probe's span
	// (QUEEN_DEDUP_CACHE). nil disables it: every push probes the whole
	// window. The registry starts its background loads (hydrations).
	Cache *cache.Cache
	// WarmStart makes NewRegistry start loading the cache of the partitions
	// pushed to inside their windows (Store.RecentPartitions) at once, in
	// one pass, ahead of their pushes (see hydrate.go).
	WarmStart bool
	// CacheBudgetBytes is the budget Cache was created with
	// (QUEEN_DEDUP_CACHE_MB << 20; 0 means 512 MiB). A hydration stops
	// reading a partition whose window holds more than the budget could.
	CacheBudgetBytes int64

	// BeforeBatch, when set, is called by an actor before each push
	// transaction, with the queue and partition names and the number of items
	// in the batch. Tests use it to hold an actor while its mailbox fills.
	BeforeBatch func(queue, partition string, items int)

	// Metrics receives the push path's metrics. nil: a private one.
	Metrics *metrics.Metrics

	// Key seals the payloads of queues with encryptionEnabled before they
	// are stored (QUEEN_ENCRYPTION_KEY); nil: no key, payloads are stored
	// as sent (with a warning per partition resolve).
	Key *crypt.Key
	// RefreshOptions bounds how long an actor trusts the queue options it
	// read (the window and the encryption flag) before reading them again,
	// so a configure made through another broker reaches its pushes
	// (default 5s). A configure through this broker reaches them at once
	// (OptionsChanged).
	RefreshOptions time.Duration
}

// WithDefaults returns c with every zero bound set to its default.
func (c Config) WithDefaults() Config {
	if c.MailboxMaxItems <= 0 {
		c.MailboxMaxItems = 10000
	}
	if c.MailboxMaxBytes <= 0 {
		c.MailboxMaxBytes = 64 << 20
	}
	if c.BatchMaxItems <= 0 {
		c.BatchMaxItems = 1000
	}
	if c.BatchMaxBytes <= 0 {
		c.BatchMaxBytes = 8 << 20
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.ActorsSoftLimit <= 0 {
		c.ActorsSoftLimit = 10000
	}
	if c.BusyIdleTimeout <= 0 {
		c.BusyIdleTimeout = time.Second
	}
	c.BusyIdleTimeout = min(c.BusyIdleTimeout, c.IdleTimeout)
	if c.PackSenders <= 0 {
		c.PackSenders = 4
	}
	if c.PackMaxBatches <= 0 {
		c.PackMaxBatches = 32
	}
	if c.Metrics == nil {
		c.Metrics = metrics.New(metrics.Config{})
	}
	if c.RefreshOptions <= 0 {
		c.RefreshOptions = 5 * time.Second
	}
	return c
}

// Stats are the registry's counters since start.
type Stats struct {
	Actors int
	// MailboxDepth is the number of items waiting in all mailboxes.
	MailboxDepth int
	Batches      uint64
	Queued       uint64
	// Duplicates counts the items answered duplicate (followers included).
	Duplicates   uint64
	MailboxFull  uint64
	PushFailures uint64
	// UnlockedDups counts the batches answered all-duplicate by the
	// read-only fast path (no row lock, no transaction id), of which
	// UnlockedByOriginals were proven by reading the segments the dedup
	// cache named (queen.push_dups_segments, packed with other partitions'
	// batches) and the others by a window probe of their own
	// (queen.push_dups); FastPathMisses counts the batches that tried it
	// and went on to the locked transaction.
	UnlockedDups        uint64
	UnlockedByOriginals uint64
	FastPathMisses      uint64
	// Withdrawn counts the push groups taken out of a mailbox because their
	// caller stopped waiting (a client that disconnected) before their batch
	// started: nothing of them was written. Abandoned counts those whose
	// caller stopped waiting once their batch had started: their verdict
	// stands, only its delivery was dropped.
	Withdrawn, Abandoned uint64
	// PackedTransactions counts the packer's round trips, PackedBatches the
	// partition batches they carried (both 0 with ShapeSingle).
	PackedTransactions uint64
	PackedBatches      uint64
	// DedupCache is the dedup cache's snapshot (a disabled cache counts
	// every watermark as a "disabled" sentinel), Hydrations its loads.
	DedupCache cache.Stats
	Hydrations HydrationStats
}

// Registry owns the live partition actors: it is the push pipeline (see
// push.go) and the source of the long-poll signals (see signals.go).
type Registry struct {
	store Store
	cfg   Config
	log   zerolog.Logger
	cache *cache.Cache
	hyd   *hydrator
	hooks hooks
	// loadingProbes holds a slot per push transaction in flight that
	// probes the whole window of a partition whose cache load is running
	// (maxLoadingProbes; see hydrate.go).
	loadingProbes chan struct{}
	// refs is what the registry knows of partitions and their queues'
	// options beyond their actors' lives (refs.go).
	refs *refs
	// pack carries ready batches to the store together (nil: ShapeSingle).
	pack *packer

	mu      sync.Mutex
	actors  map[string]*actor
	live    atomic.Int64 // len(actors), read without mu
	closing bool
	wg      sync.WaitGroup
	stop    chan struct{}
	signals pushSignals
	// mismatchLog warns about reused transaction ids, a few per period
	// whatever the rate (the counter has the totals).
	mismatchLog zerolog.Logger

	batches, queued, duplicates, mailboxFull, pushFailures atomic.Uint64
	unlockedDups, unlockedByOriginals, fastPathMisses      atomic.Uint64
	withdrawn, abandoned                                   atomic.Uint64
	// waiting is the items in every mailbox (the sum of the actors'
	// items), waitingPeak the most since the last MailboxPeak.
	waiting, waitingPeak atomic.Int64

	// epochMu orders the cache's reset on a new store epoch (write lock)
	// against what is taught to it (Learn, FinishHydrate: read lock), so
	// nothing learned from the old server lands in the reset cache.
	epochMu    sync.RWMutex
	cacheEpoch uint64 // the store epoch the cache describes

	// optionsGen moves at every OptionsChanged: an actor whose partition
	// was resolved under another generation reads its queue's options
	// again before its next batch.
	optionsGen atomic.Uint64
}

// OptionsChanged tells the actors that a queue's options changed (a
// configure committed): each reads its queue's options again before its next
// batch, so a push answered after the configure's answer follows the new
// options (encryption, window).
func (r *Registry) OptionsChanged() { r.optionsGen.Add(1) }

// hooks let the package's tests act at points no event shows from outside.
// Zero values do nothing.
type hooks struct {
	// afterLookup runs in submit between finding the actor and enqueueing.
	afterLookup func(*actor)
	// retired runs when an actor has left the registry.
	retired func(*actor)
}

// NewRegistry returns a registry pushing through store.
func NewRegistry(store Store, cfg Config) *Registry {
	cfg = cfg.WithDefaults()
	c := cfg.Cache
	if c == nil {
		c = cache.New(cache.Config{Enabled: false})
	}
	log := cfg.Logger.With().Str("component", "actor").Logger()
	var pack *packer
	if cfg.PushShape != reginatype.ShapeSingle {
		pack = &packer{store: store, shape: cfg.PushShape, maxBatches: cfg.PackMaxBatches,
			maxSenders: cfg.PackSenders, wait: cfg.PackWait, log: func(err error, batches int) {
				log.Error().Err(err).Int("batches", batches).Msg("packed push panicked")
			}}
	}
	r := &Registry{
		pack:          pack,
		store:         store,
		cfg:           cfg,
		log:           log,
		mismatchLog:   log.Sample(&zerolog.BurstSampler{Burst: mismatchLogBurst, Period: mismatchLogPeriod}),
		cache:         c,
		hyd:           newHydrator(cfg.CacheBudgetBytes),
		refs:          newRefs(),
		loadingProbes: make(chan struct{}, maxLoadingProbes),
		actors:        make(map[string]*actor),
		stop:          make(chan struct{}),
	}
	if cfg.WarmStart && cfg.Cache != nil {
		r.hyd.wg.Add(1)
		go r.warmStart()
	}
	return r
}

// The rate of the payload mismatch warnings: at most mismatchLogBurst per
// mismatchLogPeriod per broker.
const (
	mismatchLogBurst  = 5
	mismatchLogPeriod = 10 * time.Second
)

// syncEpoch returns the store's epoch, first dropping the whole cache when
// the cache describes an older one (the database server changed: what the
// cache learned may be missing from the new one, and others may have
// written offsets the cache thinks it knows).
func (r *Registry) syncEpoch() uint64 {
	e := r.store.Epoch()
	r.epochMu.RLock()
	same := e <= r.cacheEpoch
	r.epochMu.RUnlock()
	if same {
		return e
	}
	r.epochMu.Lock()
	if e > r.cacheEpoch {
		r.cache.ForgetAll()
		r.log.Warn().Uint64("epoch", e).Msg("dedup cache dropped: the database server changed (failover); " +
			"partitions are probed in full until loaded again")
		r.cacheEpoch = e
	}
	r.epochMu.Unlock()
	return e
}

// underEpoch runs f (which teaches the cache) only when the cache still
// describes epoch e, holding the reset off meanwhile; it reports whether f
// ran.
func (r *Registry) underEpoch(e uint64, f func()) bool {
	r.epochMu.RLock()
	defer r.epochMu.RUnlock()
	if r.cacheEpoch != e || r.store.Epoch() != e {
		return false
	}
	f()
	return true
}

func (r *Registry) packedTransactions() uint64 {
	if r.pack == nil {
		return 0
	}
	return r.pack.transactions.Load()
}

func (r *Registry) packedBatches() uint64 {
	if r.pack == nil {
		return 0
	}
	return r.pack.batches.Load()
}

// storePush runs b's push transaction: through the packer, with the ready
// batches of other partitions, unless the shape is ShapeSingle or b tries
// the read-only duplicate path without the cache naming its originals
// (push_dups, a window probe of its own). A batch whose originals the cache
// names goes through the packer too: its read-only proof travels with the
// other partitions' (queen.push_dups_segments).
func (r *Registry) storePush(ctx context.Context, a *actor, b *reginatype.PushBatch) (reginatype.PushResult, error) {
	if r.pack == nil || (b.ExpectDuplicates && len(b.Originals) != len(b.Hashes)) {
		return r.store.Push(ctx, b)
	}
	if a.packed.done == nil {
		a.packed.done = make(chan struct{}, 1)
	}
	return r.pack.push(&a.packed, b)
}

// remove drops a retired actor from the map (if it is still the one there).
func (r *Registry) remove(a *actor) {
	r.mu.Lock()
	if r.actors[a.key] == a {
		delete(r.actors, a.key)
		r.live.Store(int64(len(r.actors)))
	}
	r.mu.Unlock()
	if h := r.hooks.retired; h != nil {
		h(a)
	}
	r.wg.Done()
}

// idleTimeout is how long an actor whose mailbox just emptied waits for
// more before it retires: IdleTimeout, or BusyIdleTimeout while more than
// ActorsSoftLimit actors are live (with partitions written in turn, live
// actors then stay near the limit plus those written in the last
// BusyIdleTimeout, instead of every partition of the last IdleTimeout).
func (r *Registry) idleTimeout() time.Duration {
	if r.live.Load() > int64(r.cfg.ActorsSoftLimit) {
		return r.cfg.BusyIdleTimeout
	}
	return r.cfg.IdleTimeout
}

// MailboxDepth returns the number of items waiting (not yet in a batch) in
// the mailbox of the partition's actor, 0 when it has none.
func (r *Registry) MailboxDepth(queue, part string) int {
	r.mu.Lock()
	a := r.actors[key(queue, part)]
	r.mu.Unlock()
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.items
}

// mailboxDelta records n items entering (n > 0) or leaving the mailboxes.
func (r *Registry) mailboxDelta(n int) {
	w := r.waiting.Add(int64(n))
	for {
		p := r.waitingPeak.Load()
		if w <= p || r.waitingPeak.CompareAndSwap(p, w) {
			return
		}
	}
}

// MailboxPeak returns the most push items waiting in all mailboxes (not
// yet in a batch being committed) at any instant since the previous call,
// and starts a new period. The status views' job-queue figures sample it
// every second: a depth sampled at one instant misses the short bursts a
// push makes.
func (r *Registry) MailboxPeak() int {
	for {
		p, w := r.waitingPeak.Load(), r.waiting.Load()
		if r.waitingPeak.CompareAndSwap(p, w) {
			return int(max(p, w))
		}
	}
}

// Stats returns the registry's counters.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	n := len(r.actors)
	depth := 0
	for _, a := range r.actors {
		a.mu.Lock()
		depth += a.items
		a.mu.Unlock()
	}
	r.mu.Unlock()
	return Stats{
		Actors: n, MailboxDepth: depth, Batches: r.batches.Load(), Queued: r.queued.Load(),
		Duplicates: r.duplicates.Load(), MailboxFull: r.mailboxFull.Load(), PushFailures: r.pushFailures.Load(),
		UnlockedDups: r.unlockedDups.Load(), UnlockedByOriginals: r.unlockedByOriginals.Load(),
		FastPathMisses: r.fastPathMisses.Load(),
		Withdrawn:      r.withdrawn.Load(), Abandoned: r.abandoned.Load(),
		PackedTransactions: r.packedTransactions(), PackedBatches: r.packedBatches(),
		DedupCache: r.cache.Stats(), Hydrations: r.hyd.stats(),
	}
}

// Snapshot returns the registry's part of the broker's metrics snapshot
// (everything but the connection pool, which the caller adds).
func (r *Registry) Snapshot() metrics.Snapshot {
	st := r.Stats()
	c, h := &st.DedupCache, &st.Hydrations
	budget := r.cfg.CacheBudgetBytes
	if budget <= 0 {
		budget = defaultCacheBudget
	}
	if r.cfg.Cache == nil {
		budget = 0
	}
	return metrics.Snapshot{
		Actors: st.Actors, MailboxDepth: st.MailboxDepth, MailboxFull: st.MailboxFull, PushFailures: st.PushFailures,
		Batches: st.Batches, Queued: st.Queued, Duplicates: st.Duplicates,
		Withdrawn: st.Withdrawn, Abandoned: st.Abandoned,
		Packed: metrics.PackedSnapshot{RoundTrips: st.PackedTransactions, Batches: st.PackedBatches},
		ReadOnly: metrics.ReadOnlySnapshot{ByOriginals: st.UnlockedByOriginals,
			ByWindowProbe: st.UnlockedDups - st.UnlockedByOriginals, Misses: st.FastPathMisses},
		Cache: metrics.CacheSnapshot{
			Hits: c.Hits, Found: c.Found, Sentinels: c.Sentinels, SentinelsByReason: c.SentinelsByReason,
			Bytes: c.Bytes, Budget: budget, Hashes: c.Hashes,
			FilterHashes: c.FilterHashes, FilterBytes: c.FilterBytes, ColdHits: c.ColdHits,
			Partitions: c.Partitions, Hydrating: c.Hydrating, Tombstones: c.Tombstones, TooBig: c.TooBig,
			Evictions: c.Evictions,
			Hydrations: map[string]uint64{"started": h.Started, "finished": h.Finished, "failed": h.Failed,
				"aborted": h.Aborted, "truncated": h.Truncated, "busy": h.Busy, "too_deep": h.TooDeep},
			HydrationsRunning: h.Running,
		},
	}
}

// Close stops accepting pushes, lets every actor drain its mailbox (each
// waiting group is answered), cancels the dedup cache's background loads,
// ends waiting long polls, and waits for all of them to exit or for ctx to
// end. It is safe to call more than once.
func (r *Registry) Close(ctx context.Context) error {
	r.mu.Lock()
	if !r.closing {
		r.closing = true
		close(r.stop)
		r.hyd.cancel()
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); r.closeHydrations(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close actors: %w", ctx.Err())
	}
}

// Pressure is how full the mailboxes are (see Registry.Pressure).
type Pressure struct {
	// Actors is the number of live partition actors, Depth the items
	// waiting in their mailboxes, Full the mailboxes at one of their bounds
	// (the next group would be refused).
	Actors, Depth, Full int
	// Fullest is the fill of the fullest mailbox: the larger of items over
	// MailboxMaxItems and bytes over MailboxMaxBytes (0 to 1, more for a
	// single large group).
	Fullest float64
}

// Pressure reports how full the mailboxes are (the readiness probe's
// mailbox check). It walks the live actors (O(actors)).
func (r *Registry) Pressure() Pressure {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Pressure{Actors: len(r.actors)}
	for _, a := range r.actors {
		a.mu.Lock()
		items, bytes := a.items, a.bytes
		a.mu.Unlock()
		p.Depth += items
		if items >= r.cfg.MailboxMaxItems || bytes >= r.cfg.MailboxMaxBytes {
			p.Full++
		}
		fill := max(float64(items)/float64(r.cfg.MailboxMaxItems), float64(bytes)/float64(r.cfg.MailboxMaxBytes))
		p.Fullest = max(p.Fullest, fill)
	}
	return p
}
