package actor

import (
	"context"
	"errors"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/regina-mq/regina/cache"
	"github.com/regina-mq/regina/partition"
	"github.com/regina-mq/regina/reginatype"
)

// Dedup cache integration. The actor asks the cache for a probe watermark
// before each push (window > 0), teaches it the stored hashes after each push
// that wrote a segment, and forgets the partition when a push failed (its
// outcome may be unknown). When the cache cannot vouch for a partition the
// registry loads it in the background (hydration), at most maxHydrations at a
// time; pushes never wait for a load, they use the sentinel meanwhile.

const (
	// defaultMaxHydrations bounds the concurrent background loads.
	defaultMaxHydrations = 2
	// defaultCacheBudget is assumed when Config.CacheBudgetBytes is 0.
	defaultCacheBudget = 512 << 20
	// minBytesPerHash is a lower bound of what the cache holds per hash (16 B
	// in the time-ordered slice plus at least one 27 B slot of the hash map,
	// see cache.estimate). A window with more than budget/minBytesPerHash
	// hashes cannot fit, so the loader stops reading there.
	minBytesPerHash = 16 + 27
	// hydrateTimeout bounds one load.
	hydrateTimeout = 2 * time.Minute
)

// HydrationStats counts the dedup cache's background loads.
type HydrationStats struct {
	// Started loads; Finished those handed to the cache (installed, or
	// refused by it: too big, a gap, the window); Failed those aborted on a
	// database error; Aborted those aborted because the partition was
	// deleted or the broker is closing; Truncated the finished ones that
	// stopped at the row bound because the window could not fit the budget.
	Started, Finished, Failed, Aborted, Truncated uint64
	// Busy counts loads not started because maxHydrations were running (the
	// next push of that partition asks again).
	Busy uint64
	// TooDeep counts loads skipped because the partition's sidecar could not
	// fit the budget, or the room left in it (estimated before reading).
	TooDeep uint64
	// Running is the number of loads in flight.
	Running int
}

// hydrator runs the cache's background loads.
type hydrator struct {
	sem       chan struct{}
	maxHashes int
	budget    int64
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	started, finished, failed, aborted, truncated, busy, tooDeep atomic.Uint64
	// reserved is the memory the loads in flight may take (see
	// loadBytesPerHash), counted against the budget with the cache's.
	reserved atomic.Int64

	// skipUntil holds partitions whose sidecar is too deep to fit the budget:
	// no load is tried for them until the time given.
	mu        sync.Mutex
	skipUntil map[partition.UUID]time.Time
}

// tooDeepBackoff is how long a partition too deep for the budget is not
// loaded again.
const tooDeepBackoff = time.Minute

// bytesPerHashEstimate is a hash's typical cost in the cache (see
// cache/doc.go), for deciding before a load whether it could fit.
const bytesPerHashEstimate = 70

// loadBytesPerHash is what a load takes per hash while it runs: the cache's
// structures plus the rows read (16 B per hash), which live until the load
// is installed. Loads reserve it, so loads in flight and the cache together
// stay within the budget.
const loadBytesPerHash = bytesPerHashEstimate + 16

func (h *hydrator) skip(p partition.UUID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.skipUntil[p]
	if ok && time.Now().After(t) {
		delete(h.skipUntil, p)
		return false
	}
	return ok
}

func (h *hydrator) skipFor(p partition.UUID, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.skipUntil == nil {
		h.skipUntil = make(map[partition.UUID]time.Time)
	}
	h.skipUntil[p] = time.Now().Add(d)
}

func newHydrator(budget int64) *hydrator {
	if budget <= 0 {
		budget = defaultCacheBudget
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &hydrator{
		sem:       make(chan struct{}, defaultMaxHydrations),
		maxHashes: int(max(budget/minBytesPerHash, 1)),
		budget:    budget,
		ctx:       ctx,
		cancel:    cancel,
	}
}

func (h *hydrator) stats() HydrationStats {
	return HydrationStats{Started: h.started.Load(), Finished: h.finished.Load(), Failed: h.failed.Load(),
		Aborted: h.aborted.Load(), Truncated: h.truncated.Load(), Busy: h.busy.Load(), TooDeep: h.tooDeep.Load(),
		Running: len(h.sem)}
}

// needsHydration reports whether the cache's reason for a sentinel means the
// partition should be (re)loaded. ReasonHydrating is already loading and
// ReasonDisabled never will; BeginHydrate enforces the backoffs.
func needsHydration(r cache.Reason) bool {
	switch r {
	case cache.ReasonUnknown, cache.ReasonGap, cache.ReasonPressure, cache.ReasonWindow, cache.ReasonClock:
		return true
	default:
		return false
	}
}

// maybeHydrate starts loading partition p in the background unless
// maxHydrations loads are running or the cache refuses. It never blocks. Only
// actors call it, so after every actor has exited no new load starts.
func (r *Registry) maybeHydrate(p partition.UUID) {
	h := r.hyd
	if h.ctx.Err() != nil {
		return // closing
	}
	if h.skip(p) {
		return
	}
	select {
	case h.sem <- struct{}{}:
	default:
		h.busy.Add(1)
		return
	}
	epoch := r.store.Epoch()
	tok, ok := r.cache.BeginHydrate(p)
	if !ok {
		<-h.sem
		return
	}
	h.started.Add(1)
	h.wg.Add(1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				// A bug in a background load must not take the broker down:
				// drop the attempt (pushes keep the full-window probe).
				r.cache.AbortHydrate(tok)
				h.failed.Add(1)
				r.log.Error().Interface("panic", v).Str("stack", string(debug.Stack())).Msg("dedup cache: hydration panicked")
			}
			<-h.sem
			h.wg.Done()
		}()
		r.hydrate(p, tok, epoch)
	}()
}

// hydrate loads partition p in one snapshot and hands it to the cache. The
// snapshot is taken after BeginHydrate returned, as the cache requires. A
// load that was begun or read under another store epoch than the cache's is
// aborted (it may describe another server than the cache does).
func (r *Registry) hydrate(p partition.UUID, tok cache.HydrateToken, epoch uint64) {
	h := r.hyd
	ctx, cancel := context.WithTimeout(h.ctx, hydrateTimeout)
	defer cancel()
	start := time.Now()
	// Loading a window that cannot fit would read it all for nothing (and
	// compete with the pushes): estimate first, with two index lookups.
	// And never load a partition by evicting others: when the windows of the
	// active partitions together exceed the budget, loads would evict each
	// other in turn and PostgreSQL would spend its time reading windows.
	// Partitions that do not fit go on with the full-window probe.
	// The room left counts the other loads in flight (two loads that each
	// fit the room alone must not both start).
	if depth, err := r.store.SidecarDepth(ctx, p); err == nil {
		need := depth * loadBytesPerHash
		held := h.reserved.Add(need)
		defer h.reserved.Add(-need)
		if need > h.budget || r.cache.Bytes()+held > h.budget {
			r.cache.AbortHydrate(tok)
			h.tooDeep.Add(1)
			h.skipFor(p, tooDeepBackoff)
			return
		}
	}
	res, err := r.store.LoadHydration(ctx, p, h.maxHashes)
	if err != nil {
		r.cache.AbortHydrate(tok)
		if h.ctx.Err() != nil || errors.Is(err, reginatype.ErrPartitionMissing) {
			h.aborted.Add(1)
			return
		}
		h.failed.Add(1)
		r.log.Warn().Err(err).Str("partition_id", p.String()).Msg("dedup cache: hydration failed")
		return
	}
	rows := make([]cache.Segment, len(res.Rows))
	hashes := 0
	for i := range res.Rows {
		rows[i] = cache.Segment{FirstOffset: res.Rows[i].FirstOffset, CreatedAt: res.Rows[i].CreatedAt,
			Hashes: res.Rows[i].Hashes}
		hashes += len(res.Rows[i].Hashes)
	}
	// A truncated load is every in-window row below res.NextOffset and more
	// hashes than the budget can hold: the cache refuses it as too big
	// (ReasonPressure, with its backoff) rather than installing it.
	if !r.underEpoch(epoch, func() { r.cache.FinishHydrate(tok, res.NextOffset, res.WindowSeconds, res.Now, rows) }) {
		r.cache.AbortHydrate(tok)
		h.aborted.Add(1)
		return
	}
	h.finished.Add(1)
	if res.Truncated {
		h.truncated.Add(1)
	}
	r.log.Debug().Str("partition_id", p.String()).Int("rows", len(rows)).Int("hashes", hashes).
		Bool("truncated", res.Truncated).Dur("took", time.Since(start)).Msg("dedup cache: hydrated")
}

// closeHydrations cancels the loads in flight and waits for them. Call it
// only after every actor has exited (no new load can start).
func (r *Registry) closeHydrations() {
	r.hyd.cancel()
	r.hyd.wg.Wait()
}
