package actor

import (
	"context"
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
// time; a partition asked for while every slot is taken waits in a bounded
// queue, and a slot that frees takes the oldest waiting partition (so a cold
// broker loads every active partition one after the other, without waiting
// for their next pushes). Pushes never wait for a load, they use the
// sentinel meanwhile; but at most maxLoadingProbes of those full-window
// probes run at a time, the others waiting in their actors (whose next
// batch then carries every push that arrived meanwhile).
//
// Why: a restarted broker on a deep window (100M hashes) sends every push
// of its first seconds to the full-window probe, and those probes took the
// machine from the loads (perf: gingetbitmap 20% and page-cache copies 10%
// of the machine's samples, the load's reader starved), so the loads that
// take 16-18 s alone took minutes and the broker stayed at 0.05-0.07x of a
// warm one. One probe at a time leaves the loads most of the machine: they
// end sooner, and every push after them is fast (docs/performance.md).

const (
	// maxLoadingProbes bounds the push transactions in flight that probe
	// the whole window of a partition whose load is running.
	maxLoadingProbes = 1
	// defaultMaxHydrations bounds the concurrent background loads.
	defaultMaxHydrations = 2
	// defaultCacheBudget is assumed when Config.CacheBudgetBytes is 0.
	defaultCacheBudget = 512 << 20
	// hydrateTimeout bounds one load.
	hydrateTimeout = 2 * time.Minute
	// maxQueuedHydrations bounds the partitions waiting for a load slot;
	// beyond it a partition's next push asks again.
	maxQueuedHydrations = 4096
)

// HydrationStats counts the dedup cache's background loads.
type HydrationStats struct {
	// Started loads; Finished those handed to the cache (installed, or
	// refused by it: too big, a gap, the window); Failed those aborted on a
	// database error; Aborted those aborted because the partition was
	// deleted or the broker is closing; Truncated the finished ones that
	// stopped at the row bound because the window could not fit the budget.
	Started, Finished, Failed, Aborted, Truncated uint64
	// Busy counts loads not started at once because maxHydrations were
	// running: the partition was queued (it starts when a slot frees), or,
	// when the queue was full, dropped (its next push asks again).
	Busy uint64
	// TooDeep counts loads skipped because the partition's sidecar could not
	// fit the budget, or the room left in it (estimated before reading:
	// cache.LoadBytes).
	TooDeep uint64
	// Running is the number of loads in flight; Queued the partitions
	// waiting for a slot.
	Running, Queued int
}

// hydrator runs the cache's background loads.
type hydrator struct {
	sem    chan struct{}
	budget int64
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	started, finished, failed, aborted, truncated, busy, tooDeep atomic.Uint64
	// gathering counts the slots waiting for their first batch to fill (a
	// partition asked for meanwhile is queued for it, not given a slot).
	gathering atomic.Int32
	// gather is hydrateGather (tests set another).
	gather time.Duration
	// reserved is the memory the loads in flight may take (see
	// cache.LoadBytes), counted against the budget with the cache's.
	reserved atomic.Int64

	// skipUntil holds partitions whose sidecar is too deep to fit the budget:
	// no load is tried for them until the time given.
	mu        sync.Mutex
	skipUntil map[partition.UUID]time.Time
	// queue holds the partitions waiting for a load slot, oldest first;
	// queued is its set.
	queue  []partition.UUID
	queued map[partition.UUID]struct{}
	// relCh is closed (and replaced) whenever a load releases its
	// reservation.
	relCh chan struct{}
}

// released returns a channel closed at the next release of a reservation.
func (h *hydrator) released() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.relCh == nil {
		h.relCh = make(chan struct{})
	}
	return h.relCh
}

// release gives back a load's reservation and wakes the loads waiting for
// room.
func (h *hydrator) release(need int64) {
	if need == 0 {
		return
	}
	h.reserved.Add(-need)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.relCh != nil {
		close(h.relCh)
		h.relCh = nil
	}
}

// enqueue adds p to the waiting partitions unless it is there already or the
// queue is full, and reports whether p is waiting.
func (h *hydrator) enqueue(p partition.UUID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.queued[p]; ok {
		return true
	}
	if len(h.queue) >= maxQueuedHydrations {
		return false
	}
	if h.queued == nil {
		h.queued = make(map[partition.UUID]struct{})
	}
	h.queued[p] = struct{}{}
	h.queue = append(h.queue, p)
	return true
}

// dequeue takes the oldest waiting partition.
func (h *hydrator) dequeue() (partition.UUID, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		return partition.UUID{}, false
	}
	p := h.queue[0]
	h.queue[0] = partition.UUID{}
	h.queue = h.queue[1:]
	if len(h.queue) == 0 {
		h.queue = nil // let the backing array go
	}
	delete(h.queued, p)
	return p, true
}

// tooDeepBackoff is how long a partition too deep for the budget is not
// loaded again.
const tooDeepBackoff = time.Minute

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
		sem:    make(chan struct{}, defaultMaxHydrations),
		budget: budget,
		gather: hydrateGather,
		ctx:    ctx,
		cancel: cancel,
	}
}

func (h *hydrator) stats() HydrationStats {
	h.mu.Lock()
	queued := len(h.queue)
	h.mu.Unlock()
	return HydrationStats{Started: h.started.Load(), Finished: h.finished.Load(), Failed: h.failed.Load(),
		Aborted: h.aborted.Load(), Truncated: h.truncated.Load(), Busy: h.busy.Load(), TooDeep: h.tooDeep.Load(),
		Running: len(h.sem), Queued: queued}
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

// warmStart loads the cache of the partitions pushed to inside their windows
// (Config.WarmStart), most recently pushed first, ahead of their pushes: all
// of them asked for at once, so that a slot takes them together, up to
// maxHydrateBatch per pass over the window. Without it the first pushes
// asked for their partitions one by one as their actors started (each
// after its own partition lookup), so a load slot gathered two or three of
// them and the others waited for a second and a third pass over the whole
// window (10M in-window hashes over 16 partitions: passes of 2, 2 and 12
// partitions, 17 s; at 100M, passes of 16-18 s each).
func (r *Registry) warmStart() {
	h := r.hyd
	defer h.wg.Done()
	ctx, cancel := context.WithTimeout(h.ctx, hydrateTimeout)
	defer cancel()
	ids, err := r.store.RecentPartitions(ctx, maxQueuedHydrations)
	if err != nil {
		if h.ctx.Err() == nil {
			r.log.Warn().Err(err).Msg("dedup cache: the partitions to load at start could not be listed; they load at their first push")
		}
		return
	}
	r.syncEpoch()
	for _, p := range ids {
		r.maybeHydrate(p)
	}
	r.log.Debug().Int("partitions", len(ids)).Msg("dedup cache: loading the recently pushed partitions")
}

// maybeHydrate starts loading partition p in the background, or queues it
// when maxHydrations loads are running, and reports whether it did either
// (false: closing, or p is backed off). It never blocks. Only actors call
// it, so after every actor has exited no new load starts (a load in flight
// may still take a queued partition until the hydrator is cancelled).
func (r *Registry) maybeHydrate(p partition.UUID) bool {
	h := r.hyd
	if h.ctx.Err() != nil {
		return false // closing
	}
	if h.skip(p) {
		return false
	}
	if h.gathering.Load() > 0 {
		// A slot is gathering its first batch: this partition joins it.
		return h.enqueue(p)
	}
	select {
	case h.sem <- struct{}{}:
	default:
		h.busy.Add(1)
		return h.enqueue(p)
	}
	h.gathering.Add(1) // before the goroutine runs: the next partition joins
	h.wg.Add(1)
	go r.runHydrations(p)
	return true
}

// runHydrations holds one load slot: it loads p together with queued
// partitions (up to maxHydrateBatch in one pass over the sidecar), then
// further batches of queued partitions, and frees the slot when the queue
// is empty.
func (r *Registry) runHydrations(p partition.UUID) {
	h := r.hyd
	defer h.wg.Done()
	// The partitions asked for right after p (a broker that starts, or
	// restarts, pushes to all its partitions at once) join its batch: one
	// pass over the window's heap for all of them, not one per slot. The
	// starter counted this slot in gathering.
	t := time.NewTimer(h.gather)
	select {
	case <-t.C:
	case <-h.ctx.Done():
		t.Stop()
	}
	h.gathering.Add(-1)
	batch := []partition.UUID{p}
	for {
		for len(batch) < maxHydrateBatch {
			next, ok := h.dequeue()
			if !ok {
				break
			}
			batch = append(batch, next)
		}
		r.hydrateBatch(batch)
		if h.ctx.Err() != nil {
			break
		}
		batch = batch[:0]
		next, ok := h.dequeue()
		if !ok {
			break
		}
		batch = append(batch, next)
	}
	<-h.sem
	// A partition queued between the last dequeue and the release of the
	// slot would wait for another push: take it now if the slot is free.
	if h.ctx.Err() == nil {
		if next, ok := h.dequeue(); ok {
			select {
			case h.sem <- struct{}{}:
				h.gathering.Add(1)
				h.wg.Add(1)
				go r.runHydrations(next)
			default:
				h.enqueue(next) // another slot's loop will take it
			}
		}
	}
}

// maxHydrateBatch bounds the partitions one load reads together.
const maxHydrateBatch = 64

// hydrateGather is how long a slot waits for more partitions before its
// first load: the rows of partitions pushed together interleave in the
// sidecar's heap, so each load reads about all of it (at 100M in-window
// hashes, ~3 GB), whether for one partition or for 64.
const hydrateGather = 100 * time.Millisecond

// hydrating is one partition of a batch load.
type hydrating struct {
	p     partition.UUID
	tok   cache.HydrateToken
	need  int64 // bytes reserved
	depth int64 // the in-window hashes estimated (sqlstore.SidecarDepth)
	load  *cache.Load
	// missing: the partition is gone; rows: the hashes read.
	missing bool
	hashes  int
}

// hydrateBatch loads the partitions of ps the cache accepts (BeginHydrate)
// and whose windows fit the budget, in one snapshot taken after every
// BeginHydrate returned, and hands each to the cache. A load that was begun
// or read under another store epoch than the cache's is aborted (it may
// describe another server than the cache does).
func (r *Registry) hydrateBatch(ps []partition.UUID) {
	h := r.hyd
	ctx, cancel := context.WithTimeout(h.ctx, hydrateTimeout)
	defer cancel()
	start := time.Now()
	epoch := r.store.Epoch()
	var loads []hydrating
	defer func() {
		for _, l := range loads {
			h.release(l.need)
		}
		if v := recover(); v != nil {
			// A bug in a background load must not take the broker down:
			// drop the attempt (pushes keep the full-window probe).
			for _, l := range loads {
				r.cache.AbortHydrate(l.tok)
			}
			h.failed.Add(uint64(len(loads)))
			r.log.Error().Interface("panic", v).Str("stack", string(debug.Stack())).Msg("dedup cache: hydration panicked")
		}
	}()
	for _, p := range ps {
		if h.skip(p) {
			continue
		}
		tok, ok := r.cache.BeginHydrate(p)
		if !ok {
			continue
		}
		h.started.Add(1)
		// Loading a window that cannot fit would read it all for nothing
		// (and compete with the pushes): estimate first, with two index
		// lookups. And never load a partition by evicting others: when the
		// windows of the active partitions together exceed the budget,
		// loads would evict each other in turn and PostgreSQL would spend
		// its time reading windows. Partitions that do not fit go on with
		// the full-window probe. The room left counts the loads in flight
		// (two loads that each fit the room alone must not both start).
		var need, depth int64
		if d, err := r.store.SidecarDepth(ctx, p); err == nil {
			depth, need = d, r.cache.LoadBytes(d)
			if !r.reserveLoad(ctx, p, tok, need, len(loads) > 0) {
				continue
			}
		}
		loads = append(loads, hydrating{p: p, tok: tok, need: need, depth: depth})
	}
	if len(loads) == 0 {
		return
	}
	ids := make([]partition.UUID, len(loads))
	for i, l := range loads {
		ids[i] = l.p
	}
	// The rows go straight into each partition's cache.Load as they
	// arrive: a deep window is never held as rows.
	err := r.store.StreamHydrations(ctx, ids, func(heads []reginatype.Hydration) error {
		for i, hd := range heads {
			if hd.Missing {
				loads[i].missing = true
				continue
			}
			loads[i].load = r.cache.NewLoad(loads[i].tok, hd.NextOffset, hd.WindowSeconds, hd.Now, loads[i].depth)
		}
		return nil
	}, func(i int, first int64, at time.Time, hs [][16]byte) error {
		if l := &loads[i]; l.load != nil {
			l.load.Add(first, at, hs)
			l.hashes += len(hs)
		}
		return nil
	})
	if err != nil {
		for _, l := range loads {
			r.cache.AbortHydrate(l.tok)
		}
		if h.ctx.Err() != nil {
			h.aborted.Add(uint64(len(loads)))
			return
		}
		h.failed.Add(uint64(len(loads)))
		r.log.Warn().Err(err).Int("partitions", len(loads)).Msg("dedup cache: hydration failed")
		return
	}
	hashes := 0
	for i := range loads {
		r.finishHydration(&loads[i], epoch)
		hashes += loads[i].hashes
		// What the load read is the cache's now (or garbage): free the
		// reservation as each partition is installed.
		loads[i].load = nil
		h.release(loads[i].need)
		loads[i].need = 0
	}
	r.log.Debug().Int("partitions", len(loads)).Int("hashes", hashes).Dur("took", time.Since(start)).
		Msg("dedup cache: hydrated")
}

// reserveLoad reserves the memory a load of p needs (see hydrateBatch). When
// it does not fit the room left: a partition that would fit once the loads
// in flight are installed waits for them (the next batch of this slot when
// this batch has loads of its own; otherwise until another slot's load ends,
// then it tries again); one that would not is backed off (too deep). It
// reports whether p joins the batch; if not, its hydration was aborted.
func (r *Registry) reserveLoad(ctx context.Context, p partition.UUID, tok cache.HydrateToken, need int64, batchHasLoads bool) bool {
	h := r.hyd
	for {
		released := h.released()
		held := h.reserved.Add(need)
		if need <= h.budget && r.cache.Bytes()+held <= h.budget {
			return true
		}
		h.reserved.Add(-need)
		fitsAlone := need <= h.budget && r.cache.Bytes()+need <= h.budget
		switch {
		case fitsAlone && batchHasLoads:
			// This batch's rows are in the way: the next batch, once they
			// are installed.
			r.cache.AbortHydrate(tok)
			h.started.Add(^uint64(0))
			h.enqueue(p)
			return false
		case fitsAlone && held > need:
			// Another slot's loads are in the way: wait for one to end.
			select {
			case <-released:
				continue
			case <-ctx.Done():
			}
		}
		r.cache.AbortHydrate(tok)
		h.tooDeep.Add(1)
		h.skipFor(p, tooDeepBackoff)
		return false
	}
}

// finishHydration hands one partition's load to the cache.
func (r *Registry) finishHydration(l *hydrating, epoch uint64) {
	h := r.hyd
	switch {
	case l.missing || l.load == nil:
		r.cache.AbortHydrate(l.tok)
		h.aborted.Add(1)
		return
	case l.load.TooBig():
		// More hashes than the budget can hold: nothing to install; do not
		// try again before the backoff.
		l.load.Finish() // installs nothing: ReasonPressure
		h.finished.Add(1)
		h.truncated.Add(1)
		h.skipFor(l.p, tooDeepBackoff)
		return
	}
	if !r.underEpoch(epoch, l.load.Finish) {
		r.cache.AbortHydrate(l.tok)
		h.aborted.Add(1)
		return
	}
	h.finished.Add(1)
}

// closeHydrations cancels the loads in flight and waits for them. Call it
// only after every actor has exited (no new load can start).
func (r *Registry) closeHydrations() {
	r.hyd.cancel()
	r.hyd.wg.Wait()
}
