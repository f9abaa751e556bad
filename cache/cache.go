package cache

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// NoWatermark is the sentinel: probe the whole window.
const NoWatermark int64 = -1

// Config configures a Cache.
type Config struct {
	// Enabled is the kill switch (QUEEN_DEDUP_CACHE=false): when false every
	// Watermark returns the sentinel with ReasonDisabled and nothing is
	// stored.
	Enabled bool
	// BudgetBytes bounds the memory the cache holds (QUEEN_DEDUP_CACHE_MB
	// << 20). It counts estimated real memory (map slots, slices at their
	// capacity, per-partition overhead), not entries. A budget <= 0 disables
	// the cache.
	BudgetBytes int64
	// MaxSpan bounds the offsets a watermark probe may cover (default
	// DefaultMaxSpan): when a repeat of an old id would pull the watermark
	// further below what the cache knows, Watermark answers ReasonSpan.
	MaxSpan int64
	// HotHashes bounds the hashes a partition holds exactly (default
	// DefaultHotHashes): beyond it, its oldest segments are held as Bloom
	// filters (about 4 bytes a hash instead of about 40), so a deep window
	// fits the budget. A batch hash a filter may hold lowers the watermark
	// below that filter's segments (ReasonCold when that is beyond MaxSpan).
	HotHashes int
}

// DefaultHotHashes is the default Config.HotHashes: 65,536 hashes, about
// 3 MiB a partition.
const DefaultHotHashes = 1 << 16

// DefaultMaxSpan is the default Config.MaxSpan.
const DefaultMaxSpan = 2048

// Cache is the broker's in-window hash cache. Its only output is a probe
// watermark. It is safe for concurrent use; each partition is expected to be
// driven by one goroutine (its actor) plus, while hydrating, its loader.
type Cache struct {
	enabled bool
	budget  int64

	mu        sync.Mutex
	lru       *simplelru.LRU[[16]byte, *entry]
	bytes     int64
	evictions uint64
	tooBig    map[[16]byte]*tooBigRec

	hits      atomic.Uint64
	found     atomic.Uint64
	coldHits  atomic.Uint64
	sentinels [numReasons]atomic.Uint64
	maxSpan   int64
	hotMax    int
}

// tooBigRec remembers a partition that did not fit the whole budget, so it
// is not re-loaded in a loop.
type tooBigRec struct {
	strikes   uint8
	clock     int64 // newest database time seen (Learn keeps it moving)
	notBefore int64
}

func (r *tooBigRec) active() bool { return r.clock < r.notBefore }

const (
	maxTooBig       = 4096
	pressureBackoff = time.Minute
	pressureMax     = time.Hour
	// A too-big record older than this (in database time) starts over.
	pressureReset = 2 * time.Hour
	// Clean appends after which a partition's gap strikes are forgotten.
	okLearnsReset = 64
)

// New returns a cache.
func New(cfg Config) *Cache {
	l, err := simplelru.NewLRU[[16]byte, *entry](math.MaxInt, nil)
	if err != nil {
		panic(err) // only for a non-positive size
	}
	if cfg.MaxSpan <= 0 {
		cfg.MaxSpan = DefaultMaxSpan
	}
	if cfg.HotHashes <= 0 {
		cfg.HotHashes = DefaultHotHashes
	}
	return &Cache{
		maxSpan: cfg.MaxSpan,
		hotMax:  cfg.HotHashes,
		enabled: cfg.Enabled && cfg.BudgetBytes > 0,
		budget:  cfg.BudgetBytes,
		lru:     l,
		tooBig:  make(map[[16]byte]*tooBigRec),
	}
}

// Watermark returns W for a batch of partition p: the highest offset such
// that no hash of the batch occurs, in a segment the probe could match, at
// or below it. windowSeconds is the window the push transaction will apply
// (the caller's current belief, also sent as push_segment's p_window_hint).
//
// If p is known up to K: W = K, lowered to f-1 for each batch hash the cache
// holds in a segment whose first offset is f (the probe filters segments by
// first_offset > W, so W must drop below the segment, not only below the
// frame). Otherwise NoWatermark and the reason. Watermark does not allocate.
func (c *Cache) Watermark(p [16]byte, windowSeconds int, hashes [][16]byte) (int64, Reason) {
	w, _, r := c.WatermarkFound(p, windowSeconds, hashes)
	return w, r
}

// WatermarkFound is Watermark that also returns how many of hashes the cache
// holds (0 unless the reason is ReasonNone or ReasonSpan). found ==
// len(hashes) predicts a batch of duplicates only: the cache may still hold a
// hash whose segment has left the window or was purged, so only the
// database's probe is proof.
func (c *Cache) WatermarkFound(p [16]byte, windowSeconds int, hashes [][16]byte) (int64, int, Reason) {
	w, found, _, r := c.WatermarkOriginals(p, windowSeconds, hashes, nil)
	return w, found, r
}

// WatermarkOriginals is WatermarkFound that also names, when the cache holds
// every hash of the batch, the segment each one's original is in: origs
// (dst's storage reused) then holds, for hashes[i], the first offset of the
// lowest segment the cache holds it in (or a hash sharing its key: that
// segment may then not hold hashes[i] at all, which the database's read of it
// shows); otherwise origs is nil. By the
// cache's invariant (every hash of every segment up to K that may be inside
// the window is held), no occurrence of hashes[i] inside the window lies
// below origs[i]: the same promise as the watermark, made per hash. Like
// the watermark it is a promise, not a proof (the segment may have left the
// window, or the database may have purged it); the database proves.
func (c *Cache) WatermarkOriginals(p [16]byte, windowSeconds int, hashes [][16]byte, dst []int64) (int64, int, []int64, Reason) {
	if !c.enabled {
		return c.sentinel4(ReasonDisabled)
	}
	if windowSeconds <= 0 {
		// Deduplication is off: there is no probe to shorten.
		return c.sentinel4(ReasonWindow)
	}
	c.mu.Lock()
	e, ok := c.lru.Get(p)
	if !ok {
		r := ReasonUnknown
		if rec := c.tooBig[p]; rec != nil && rec.active() {
			r = ReasonPressure
		}
		c.mu.Unlock()
		return c.sentinel4(r)
	}
	c.mu.Unlock()

	e.mu.Lock()
	if e.dead.Load() {
		e.mu.Unlock()
		return c.sentinel4(ReasonUnknown)
	}
	switch e.state() {
	case stateHydrating:
		e.mu.Unlock()
		return c.sentinel4(ReasonHydrating)
	case stateTomb:
		r := e.tomb
		e.mu.Unlock()
		return c.sentinel4(r)
	default: // known: answered below
	}
	if int64(windowSeconds)*int64(time.Second) > e.windowNs {
		// The window grew: the cache may have trimmed, or never loaded,
		// hashes that are inside it now.
		e.release(ReasonWindow, 0)
		e.publish()
		e.mu.Unlock()
		c.sync(e)
		return c.sentinel4(ReasonWindow)
	}
	w, found, exact, cold := e.watermark(hashes)
	var origs []int64
	if exact == len(hashes) && exact > 0 {
		origs = dst[:0]
		for i := range hashes {
			origs = append(origs, e.m[hashKey(&hashes[i])])
		}
	}
	k := e.k
	e.mu.Unlock()
	if cold {
		c.coldHits.Add(1)
	}
	if k-w > c.maxSpan {
		r := ReasonSpan
		if cold {
			r = ReasonCold
		}
		w, _ = c.sentinel(r)
		return w, found, origs, r
	}
	c.hits.Add(1)
	if found > 0 {
		c.found.Add(uint64(found))
	}
	return w, found, origs, ReasonNone
}

func (c *Cache) sentinel4(r Reason) (int64, int, []int64, Reason) {
	w, r := c.sentinel(r)
	return w, 0, nil, r
}

func (c *Cache) sentinel(r Reason) (int64, Reason) {
	c.sentinels[r].Add(1)
	return NoWatermark, r
}

// Learn records a committed segment of partition p: hashes[k] at offset
// first+k, created at createdAt (the push transaction's created_at, i.e. the
// database's now()). windowSeconds is the window that transaction applied.
// Call it after every push that wrote a segment (not after an all-duplicate
// push, which writes nothing), in commit order.
//
// If p is known up to K: a segment ending at or below K is ignored (a
// hydration already loaded it); first == K+1 appends; first > K+1 means
// someone else wrote offsets the cache never saw, so the partition is
// dropped (ReasonGap) rather than extending K across the hole. A window
// larger than the one the partition covers, or 0, drops it (ReasonWindow);
// a createdAt more than TrimMargin older than the newest seen drops it
// (ReasonClock). While p hydrates the segment is buffered for
// FinishHydrate. Otherwise Learn does nothing.
func (c *Cache) Learn(p [16]byte, windowSeconds int, first int64, hashes [][16]byte, createdAt time.Time) {
	if !c.enabled || len(hashes) == 0 {
		return
	}
	created := createdAt.UnixNano()
	c.mu.Lock()
	e, ok := c.lru.Get(p)
	if !ok {
		if rec := c.tooBig[p]; rec != nil && created > rec.clock {
			rec.clock = created
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()

	e.mu.Lock()
	if e.dead.Load() {
		e.mu.Unlock()
		return
	}
	e.seeTime(created)
	switch e.state() {
	case stateTomb:
		e.mu.Unlock()
		return
	case stateHydrating:
		cp := make([]uint64, len(hashes))
		for i := range hashes {
			cp[i] = hashKey(&hashes[i])
		}
		e.buf = append(e.buf, bufSeg{first: first, created: created, window: windowSeconds, keys: cp})
		e.bufBytes += bufSegOverhead + int64(cap(cp))*hashBytes
	case stateKnown:
		e.learn(windowSeconds, first, hashes, created)
	}
	e.publish()
	e.mu.Unlock()
	c.sync(e)
}

func (e *entry) learn(windowSeconds int, first int64, hashes [][16]byte, created int64) {
	last := first + int64(len(hashes)) - 1
	switch w := int64(windowSeconds) * int64(time.Second); {
	case w <= 0 || w > e.windowNs:
		e.release(ReasonWindow, 0)
		return
	case w < e.windowNs:
		// The window shrank: holding less is still complete for it, and a
		// later growth is caught by the check above.
		e.windowNs = w
	}
	switch {
	case last <= e.k:
		// Already known (committed before the hydration snapshot).
		return
	case first != e.k+1:
		// A hole (first > K+1), or a segment straddling K, which cannot
		// happen with atomic segments: never extend K across it.
		e.dropGap()
		return
	case e.newest != noTime && created < e.newest-marginNs:
		e.release(ReasonClock, 0)
		return
	}
	e.addSeg(first, created, hashes)
	e.trim()
	e.freeze()
	if e.okLearns++; e.okLearns >= okLearnsReset {
		e.strikes = 0
	}
}

// Forget drops partition p whatever its state (its queue was deleted, or the
// caller saw a verdict it cannot explain). A hydration in flight for p is
// discarded when it finishes.
func (c *Cache) Forget(p [16]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tooBig, p)
	if e, ok := c.lru.Peek(p); ok {
		c.lru.Remove(p)
		c.removeLocked(e)
	}
}

// ForgetAll drops every partition, whatever its state, and the too-big
// records: the database the cache described was replaced (a failover to a
// standby that may lack commits the cache learned). Hydrations in flight
// are discarded when they finish.
func (c *Cache) ForgetAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.tooBig)
	for _, p := range c.lru.Keys() {
		if e, ok := c.lru.Peek(p); ok {
			c.lru.Remove(p)
			c.removeLocked(e)
		}
	}
}

// sync brings e's accounted size up to date and evicts while over budget.
// Never call it with e.mu held.
func (c *Cache) sync(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !e.dead.Load() {
		nb := e.size.Load()
		c.bytes += nb - e.acct
		e.acct = nb
	}
	c.evictLocked()
}

// evictLocked evicts least recently used partitions, whole, while the cache
// is over budget. A partition bigger than the whole budget is remembered as
// too big.
func (c *Cache) evictLocked() {
	for c.bytes > c.budget {
		k, e, ok := c.lru.RemoveOldest()
		if !ok {
			return
		}
		tooBig := e.acct > c.budget
		c.removeLocked(e)
		c.evictions++
		if tooBig {
			c.markTooBigLocked(k, e.clock.Load())
		}
	}
}

func (c *Cache) removeLocked(e *entry) {
	e.dead.Store(true)
	c.bytes -= e.acct
	e.acct = 0
}

// markTooBigLocked records that partition p does not fit the budget:
// Watermark answers ReasonPressure and BeginHydrate refuses until the
// partition's database clock has advanced by a backoff (1 min, doubling per
// consecutive failure, capped at 1 h).
func (c *Cache) markTooBigLocked(p [16]byte, clock int64) {
	rec := c.tooBig[p]
	if rec == nil {
		if len(c.tooBig) >= maxTooBig {
			// Forgetting a record only allows an earlier retry.
			for k := range c.tooBig {
				delete(c.tooBig, k)
				break
			}
		}
		rec = &tooBigRec{clock: noTime}
		c.tooBig[p] = rec
	} else if rec.clock != noTime && clock != noTime && clock-rec.notBefore > int64(pressureReset) {
		rec.strikes = 0
	}
	if clock > rec.clock {
		rec.clock = clock
	}
	if rec.strikes < 16 {
		rec.strikes++
	}
	d := min(pressureBackoff<<(rec.strikes-1), pressureMax)
	if rec.clock == noTime {
		rec.notBefore = noTime // no clock to measure a backoff with
		return
	}
	rec.notBefore = rec.clock + int64(d)
}

// Stats is a snapshot of the cache's state and counters.
type Stats struct {
	// Partitions is the number of partitions held (known), Hydrating those
	// being loaded, Tombstones those dropped that remember why.
	Partitions, Hydrating, Tombstones int
	// TooBig is the number of partitions remembered as too big.
	TooBig int
	// Bytes is the estimated memory held; Hashes the hashes held.
	Bytes  int64
	Hashes int64
	// Hits counts Watermark calls answered from a known partition; Found the
	// batch hashes found in the cache by those calls (likely duplicates);
	// Sentinels the calls answered NoWatermark for a reason other than
	// ReasonNone, broken down by Reason.String().
	Hits, Found, Sentinels uint64
	SentinelsByReason      map[string]uint64
	// Evictions counts partitions evicted to stay within the budget.
	Evictions uint64
	// FilterHashes is how many of Hashes are held in Bloom filter blocks
	// (the older part of windows deeper than Config.HotHashes), FilterBytes
	// the memory of those filters (part of Bytes). ColdHits counts the
	// Watermark calls lowered by a filter block (a batch hash that may be
	// among those older hashes: ReasonCold when beyond MaxSpan).
	FilterHashes, FilterBytes int64
	ColdHits                  uint64
}

// Bytes returns the estimated memory the cache holds, without walking the
// partitions (Stats does).
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Stats returns a snapshot. It walks the held partitions (O(partitions)).
func (c *Cache) Stats() Stats {
	s := Stats{
		Hits:              c.hits.Load(),
		Found:             c.found.Load(),
		ColdHits:          c.coldHits.Load(),
		SentinelsByReason: make(map[string]uint64, numReasons),
	}
	for r := Reason(1); r < numReasons; r++ {
		n := c.sentinels[r].Load()
		s.Sentinels += n
		s.SentinelsByReason[r.String()] = n
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s.Bytes = c.bytes
	s.Evictions = c.evictions
	s.TooBig = len(c.tooBig)
	for _, e := range c.lru.Values() {
		switch e.state() {
		case stateKnown:
			s.Partitions++
		case stateHydrating:
			s.Hydrating++
		default:
			s.Tombstones++
		}
		s.Hashes += e.live.Load()
		s.FilterHashes += e.coldN.Load()
		s.FilterBytes += e.coldBytes.Load()
	}
	return s
}
