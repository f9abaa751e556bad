package actor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
	"github.com/regina-mq/regina/sqlstore"
)

// Config bounds the actors. Zero fields take their defaults.
type Config struct {
	// MailboxMaxItems bounds the items waiting in one partition's mailbox
	// (default 10000). A group that would cross it is refused with
	// reginatype.ErrMailboxFull, unless the mailbox is empty (a single large push is
	// always accepted; the HTTP body limit bounds it).
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
	// IdleTimeout retires an actor whose mailbox stayed empty this long
	// (default 30s).
	IdleTimeout time.Duration
	// Logger receives the actors' logs.
	Logger zerolog.Logger

	// Cache is the in-window hash cache that lowers the push probe's span
	// (QUEEN_DEDUP_CACHE). nil disables it: every push probes the whole
	// window. The registry starts its background loads (hydrations).
	Cache *cache.Cache
	// CacheBudgetBytes is the budget Cache was created with
	// (QUEEN_DEDUP_CACHE_MB << 20; 0 means 512 MiB). A hydration stops
	// reading a partition whose window holds more than the budget could.
	CacheBudgetBytes int64

	// BeforeBatch, when set, is called by an actor before each push
	// transaction, with the queue and partition names and the number of items
	// in the batch. Tests use it to hold an actor while its mailbox fills.
	BeforeBatch func(queue, partition string, items int)

	// Metrics receives the push path's metrics; the registry also installs
	// itself as its scrape-time source. nil: a private one (Registry.Metrics).
	Metrics *metrics.Metrics
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
	if c.Metrics == nil {
		c.Metrics = metrics.New(metrics.Config{})
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
	Duplicates   uint64
	MailboxFull  uint64
	PushFailures uint64
	// DedupCache is the dedup cache's snapshot (a disabled cache counts
	// every watermark as a "disabled" sentinel), Hydrations its loads.
	DedupCache cache.Stats
	Hydrations HydrationStats
}

// Registry owns the live partition actors and is the broker's entry point
// for pushes and queue administration.
type Registry struct {
	store *sqlstore.Store
	cfg   Config
	log   zerolog.Logger
	cache *cache.Cache
	hyd   *hydrator

	mu      sync.Mutex
	actors  map[string]*actor
	closing bool
	wg      sync.WaitGroup
	stop    chan struct{}
	signals pushSignals

	batches, queued, duplicates, mailboxFull, pushFailures atomic.Uint64
}

// NewRegistry returns a registry pushing through store.
func NewRegistry(store *sqlstore.Store, cfg Config) *Registry {
	cfg = cfg.WithDefaults()
	c := cfg.Cache
	if c == nil {
		c = cache.New(cache.Config{Enabled: false})
	}
	r := &Registry{
		store:  store,
		cfg:    cfg,
		log:    cfg.Logger.With().Str("component", "actor").Logger(),
		cache:  c,
		hyd:    newHydrator(cfg.CacheBudgetBytes),
		actors: make(map[string]*actor),
		stop:   make(chan struct{}),
	}
	cfg.Metrics.SetSource(r.metricsSnapshot)
	return r
}

// Item is one push item, validated by the caller. Payload must not alias a
// buffer the caller reuses: the actor reads it after the caller returns.
type Item struct {
	TransactionID string
	TraceID       partition.UUID
	HasTrace      bool
	Payload       []byte
}

// Result is the verdict of one item.
type Result struct {
	Status partition.Status
	// MessageID is the stored message's id, or for a duplicate the original's
	// (partition.ZeroUUID when the original's segment is gone).
	MessageID partition.UUID
}

// Group is the part of a push request that targets one partition. The actor
// fills Results (one per item, in order) or sets Err for the whole group.
type Group struct {
	Queue, Partition string
	Items            []Item
	Results          []Result
	// PartitionID is the partition the group was written to.
	PartitionID partition.UUID
	// Err is set when the group as a whole failed; no item of it was written,
	// or (reginatype.ErrOutcomeUnknown) the outcome is unknown.
	Err error

	bytes int
	done  chan struct{}
}

func key(queue, part string) string { return queue + "\x00" + part }

// Push hands every group to its partition's actor and waits until all are
// answered. Groups for different partitions commit independently.
func (r *Registry) Push(ctx context.Context, groups []*Group) {
	for _, g := range groups {
		g.done = make(chan struct{})
		g.Results = make([]Result, len(g.Items))
		g.bytes = 0
		for i := range g.Items {
			g.bytes += len(g.Items[i].Payload) + len(g.Items[i].TransactionID)
		}
		if err := r.submit(g); err != nil {
			g.Err = err
			close(g.done)
		}
	}
	for _, g := range groups {
		<-g.done
	}
}

func (r *Registry) submit(g *Group) error {
	k := key(g.Queue, g.Partition)
	for {
		r.mu.Lock()
		if r.closing {
			r.mu.Unlock()
			return reginatype.ErrShuttingDown
		}
		a := r.actors[k]
		if a == nil {
			a = newActor(r, g.Queue, g.Partition)
			r.actors[k] = a
			r.wg.Add(1)
			go a.run()
		}
		r.mu.Unlock()
		err := a.enqueue(g)
		if err == errRetired {
			continue // it retired between lookup and enqueue: start a new one
		}
		if err == reginatype.ErrMailboxFull {
			r.mailboxFull.Add(1)
		}
		return err
	}
}

// remove drops a retired actor from the map (if it is still the one there).
func (r *Registry) remove(a *actor) {
	r.mu.Lock()
	if r.actors[a.key] == a {
		delete(r.actors, a.key)
	}
	r.mu.Unlock()
	r.wg.Done()
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
		Actors: n, MailboxDepth: depth, Batches: r.batches.Load(), Queued: r.queued.Load(), Duplicates: r.duplicates.Load(),
		MailboxFull: r.mailboxFull.Load(), PushFailures: r.pushFailures.Load(),
		DedupCache: r.cache.Stats(), Hydrations: r.hyd.stats(),
	}
}

// Close stops accepting pushes, lets every actor drain its mailbox (each
// waiting group is answered), cancels the dedup cache's background loads,
// and waits for all of them to exit or for ctx to end. It is safe to call
// more than once.
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

// Ping checks the database.
func (r *Registry) Ping(ctx context.Context) error { return r.store.Ping(ctx) }

// PoolStats returns the database pool's figures.
func (r *Registry) PoolStats() sqlstore.PoolStats { return r.store.PoolStats() }

// Configure fully replaces a queue's options (creating it when missing).
func (r *Registry) Configure(ctx context.Context, queue, namespace, task string, o partition.QueueOptions) (reginatype.ConfiguredQueue, error) {
	return r.store.Configure(ctx, queue, namespace, task, o)
}

// DeleteQueue deletes a queue and everything in it, and drops its partitions
// from the dedup cache. Live actors of its partitions notice at their next
// batch and recreate the partition.
func (r *Registry) DeleteQueue(ctx context.Context, queue string) (bool, error) {
	existed, parts, err := r.store.DeleteQueue(ctx, queue)
	for _, p := range parts {
		r.cache.Forget(p)
	}
	return existed, err
}

// ListQueues lists every queue.
func (r *Registry) ListQueues(ctx context.Context) ([]reginatype.QueueSummary, error) {
	return r.store.ListQueues(ctx)
}
