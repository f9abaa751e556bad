package cache

import (
	"cmp"
	"slices"
	"time"
	"unsafe"
)

// Segment is one queen.log_txns row as the hydration loader reads it.
type Segment struct {
	FirstOffset int64
	CreatedAt   time.Time
	Hashes      [][16]byte
}

// HydrateToken identifies one hydration attempt. The zero token is inert.
type HydrateToken struct {
	e   *entry
	gen uint64
}

// BeginHydrate starts loading partition p. It returns false when the cache
// is disabled, p is already held or being loaded, or p is backing off (after
// repeated gaps, or because it did not fit the budget). Otherwise p answers
// ReasonHydrating until FinishHydrate or AbortHydrate, and Learns for p are
// buffered.
//
// The loader must then read, in ONE snapshot taken after BeginHydrate
// returned, the partition's next_offset N and the log_txns rows of p with
// created_at > now() - (window + TrimMargin), and call FinishHydrate.
func (c *Cache) BeginHydrate(p [16]byte) (HydrateToken, bool) {
	if !c.enabled {
		return HydrateToken{}, false
	}
	for {
		c.mu.Lock()
		e, ok := c.lru.Get(p)
		if !ok {
			if rec := c.tooBig[p]; rec != nil && rec.active() {
				c.mu.Unlock()
				return HydrateToken{}, false
			}
			e = &entry{key: p, gen: 1, k: -1, newest: noTime, notBefore: noTime, hotMax: c.hotMax}
			e.clock.Store(noTime)
			e.st.Store(uint32(stateHydrating))
			e.publish()
			c.lru.Add(p, e)
			e.acct = e.size.Load()
			c.bytes += e.acct
			c.evictLocked()
			c.mu.Unlock()
			return HydrateToken{e: e, gen: 1}, true
		}
		c.mu.Unlock()

		e.mu.Lock()
		if e.dead.Load() {
			// Evicted or forgotten meanwhile: look again.
			e.mu.Unlock()
			continue
		}
		if e.state() != stateTomb || !e.hydrateAllowed() {
			e.mu.Unlock()
			return HydrateToken{}, false
		}
		e.gen++
		e.buf, e.bufBytes = nil, 0
		e.st.Store(uint32(stateHydrating))
		t := HydrateToken{e: e, gen: e.gen}
		e.mu.Unlock()
		return t, true
	}
}

// current reports whether t is the entry's hydration in progress. Call
// under e.mu.
func (t HydrateToken) current() bool {
	return !t.e.dead.Load() && t.e.state() == stateHydrating && t.e.gen == t.gen
}

// AbortHydrate drops a hydration attempt (the loader failed). The partition
// becomes unknown again.
func (c *Cache) AbortHydrate(t HydrateToken) {
	if t.e == nil {
		return
	}
	t.e.mu.Lock()
	ok := t.current()
	t.e.mu.Unlock()
	if ok {
		c.removeIf(t.e)
	}
}

// removeIf removes e from the index if it is still there.
func (c *Cache) removeIf(e *entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.lru.Peek(e.key); ok && cur == e {
		c.lru.Remove(e.key)
		c.removeLocked(e)
	}
}

// FinishHydrate installs the partition loaded for t: known up to
// K = nextOffset-1, holding the hashes of rows (rows' order does not matter;
// the caller keeps the slices), the newest exactly and, beyond three
// quarters of Config.HotHashes, the older ones in filter blocks. It is
// NewLoad, Add for each row and Finish (with the depth taken from rows). windowSeconds is the
// queue's window read in the same snapshot, dbNow that snapshot's now() (the
// zero time if unknown). Rows older than dbNow - window - TrimMargin are
// skipped.
//
// Learns that arrived while hydrating are merged: those with first <
// nextOffset were already in the snapshot and are skipped; the others must
// continue exactly from nextOffset, each from the end of the previous one.
// If they do not (someone else wrote in between), nothing is installed: the
// partition answers ReasonGap and can be re-loaded after a short backoff.
// Installing up to the end of the contiguous run would be just as safe, but
// the hole can never be filled, so the very next Learn would drop the
// partition anyway. Likewise a buffered Learn whose window is larger than
// windowSeconds (or 0) installs nothing (ReasonWindow), and a load that does
// not fit the budget installs nothing (ReasonPressure).
//
// A stale token (the partition was forgotten, evicted or re-loaded) is
// ignored.
func (c *Cache) FinishHydrate(t HydrateToken, nextOffset int64, windowSeconds int, dbNow time.Time, rows []Segment) {
	if !c.enabled || t.e == nil {
		return
	}
	newest := int64(noTime)
	if !dbNow.IsZero() {
		newest = dbNow.UnixNano()
	}
	lowest := nextOffset
	for i := range rows {
		newest = max(newest, rows[i].CreatedAt.UnixNano())
		lowest = min(lowest, rows[i].FirstOffset)
	}
	l := c.newLoad(t, nextOffset, windowSeconds, newest, nextOffset-lowest)
	for i := range rows {
		l.Add(rows[i].FirstOffset, rows[i].CreatedAt, rows[i].Hashes)
	}
	l.Finish()
}

// A Load is a hydration being read row by row (NewLoad, Add for every row
// in any order, Finish), so that a deep window is never held in memory as
// rows: the hashes of the newest rows are kept for the exact tier (8 bytes
// each until Finish builds the map), the others go straight into the
// filter blocks they will be held in. It is not safe for concurrent use; it
// is FinishHydrate for rows that arrive one at a time.
type Load struct {
	c        *Cache
	t        HydrateToken
	next     int64
	windowNs int64
	newest   int64 // the newest database time seen: dbNow, then rows' created_at
	cutoff   int64 // rows created before it are outside the window: skipped
	// split: rows starting at or above it are held exactly.
	split int64
	hot   []hotRow
	hotN  int
	// The rows below split go to block (first - lo0) / span of cold
	// (clamped), each block allocated at its first row.
	lo0, span int64
	cold      []coldBlock
	bytes     int64 // hot keys and filters allocated
	bad       bool  // a row outside [0, next) or overlapping: install nothing
	over      bool  // past the budget: install nothing
	keys      []uint64
}

// hotRow is a row kept for the exact tier.
type hotRow struct {
	first, created int64
	keys           []uint64
}

// NewLoad begins reading the rows of hydration t (see BeginHydrate), read
// in one snapshot together with the partition's nextOffset, its queue's
// windowSeconds and the snapshot's now() (dbNow). depth is an estimate of
// the in-window hashes (nextOffset minus the lowest offset of a row inside
// the window: sqlstore.SidecarDepth): it sizes the filter blocks, and a
// wrong estimate only makes their false positives likelier or their memory
// larger. Rows created before dbNow - window - TrimMargin are skipped.
func (c *Cache) NewLoad(t HydrateToken, nextOffset int64, windowSeconds int, dbNow time.Time, depth int64) *Load {
	newest := int64(noTime)
	if !dbNow.IsZero() {
		newest = dbNow.UnixNano()
	}
	return c.newLoad(t, nextOffset, windowSeconds, newest, depth)
}

func (c *Cache) newLoad(t HydrateToken, next int64, windowSeconds int, newest, depth int64) *Load {
	l := &Load{c: c, t: t, next: next, windowNs: int64(windowSeconds) * int64(time.Second), newest: newest, cutoff: noTime}
	if newest != noTime {
		l.cutoff = newest - l.windowNs - marginNs
	}
	// A window that fits the exact tier (by the estimate) is held exactly,
	// as a partition that never grew past it is; a deeper one keeps three
	// quarters of the tier, as freezing leaves it.
	keep := int64(c.hotMax - c.hotMax/4)
	if depth <= int64(c.hotMax) {
		keep = max(keep, depth)
	}
	l.split = next - keep
	l.lo0 = max(0, next-max(depth, 0))
	if r := l.split - l.lo0; r > 0 {
		// About four blocks of the older hashes (at least hotMax each), as
		// steady pushes make them (entry.coldFor): the oldest goes when
		// its rows leave the window.
		l.span = max(int64(c.hotMax), (r+3)/4)
		l.cold = make([]coldBlock, (r+l.span-1)/l.span)
	} else {
		l.span = max(int64(c.hotMax), 1)
		l.cold = make([]coldBlock, 1)
	}
	return l
}

// Add reads one log_txns row of the partition: its first offset, created_at
// and hashes in frame order (not kept: the caller may reuse hashes).
func (l *Load) Add(first int64, createdAt time.Time, hashes [][16]byte) {
	if l.bad || l.over || len(hashes) == 0 {
		return
	}
	last := first + int64(len(hashes)) - 1
	if first < 0 || last >= l.next {
		l.bad = true // rows past next_offset
		return
	}
	created := createdAt.UnixNano()
	if created < l.cutoff {
		return
	}
	if created > l.newest {
		l.newest = created
	}
	if first >= l.split {
		keys := make([]uint64, len(hashes))
		for i := range hashes {
			keys[i] = hashKey(&hashes[i])
		}
		l.hot = append(l.hot, hotRow{first: first, created: created, keys: keys})
		l.hotN += len(keys)
		l.grow(int64(len(keys))*(hashBytes+mapSlotBytes*2) + int64(unsafe.Sizeof(hotRow{})))
		return
	}
	j := min(max((first-l.lo0)/l.span, 0), int64(len(l.cold)-1))
	b := &l.cold[j]
	if b.cap == 0 {
		// Sized for the offsets of its range: at most one hash each.
		n := int(l.span)
		if j == int64(len(l.cold)-1) {
			n = int(max(l.split-(l.lo0+j*l.span), 1))
		}
		*b = coldBlock{lo: -1, newest: noTime, cap: n, f: newBloom(n)}
		if l.grow(b.f.bytes() + coldBlockBytes); l.over {
			return
		}
	}
	// A row's keys at once: their cache misses overlap (bloom.addAll; the
	// filter inserts were 18.7% of a cold broker's machine at 100M, and
	// BenchmarkBloomAddRows adds 2-3x faster so).
	l.keys = l.keys[:0]
	for i := range hashes {
		l.keys = append(l.keys, hashKey(&hashes[i]))
	}
	b.f.addAll(l.keys)
	if b.lo < 0 || first < b.lo {
		b.lo = first
	}
	b.hi = max(b.hi, last)
	b.newest = max(b.newest, created)
	b.n += len(hashes)
}

// TooBig reports whether the load was abandoned because what it read would
// not fit the budget (Finish then installs nothing: ReasonPressure).
func (l *Load) TooBig() bool { return l.over }

// loadExactBytes is what a hash held exactly costs while a load reads it and
// once installed (its 8-byte key kept until Finish, then a map slot at 8/7
// to 16/7 slots per key and 8 B in the time-ordered slice, a share of its
// segment): measured 38-44 B installed.
const loadExactBytes = 64

// LoadBytes estimates the memory a load of a partition with hashes in-window
// hashes takes while it reads and once it is installed: the newest
// (Config.HotHashes, less a quarter) held exactly, the rest in filters at
// bloomBits per hash. A load never holds its rows (see Load), so this is
// what the budget must have room for.
func (c *Cache) LoadBytes(hashes int64) int64 {
	if hashes <= 0 {
		return entryOverhead
	}
	exact := min(hashes, int64(c.hotMax))
	b := entryOverhead + exact*loadExactBytes
	if cold := hashes - exact; cold > 0 {
		b += cold*bloomBits/8 + 5*(coldBlockBytes+64) // about four blocks
	}
	return b
}

// grow accounts n more bytes; past the budget the load is abandoned (it
// would not fit) and what it held is let go.
func (l *Load) grow(n int64) {
	l.bytes += n
	if l.bytes > l.c.budget {
		l.over = true
		l.hot, l.cold = nil, nil
	}
}

// Finish installs what was read, as FinishHydrate describes: known up to
// nextOffset-1, the Learns buffered meanwhile merged, or nothing (ReasonGap,
// ReasonWindow, ReasonPressure). A stale token is ignored.
func (l *Load) Finish() {
	c, t := l.c, l.t
	e := t.e
	if !c.enabled || e == nil {
		return
	}
	e.mu.Lock()
	ok := t.current()
	e.mu.Unlock()
	if !ok {
		return
	}
	newest := l.newest
	switch {
	case l.windowNs <= 0:
		c.dropHydration(t, newest, ReasonWindow)
		return
	case l.bad || l.next < 0:
		c.dropHydration(t, newest, ReasonGap)
		return
	case l.over:
		c.dropHydration(t, newest, ReasonPressure)
		return
	}
	// The blocks that received rows, in offset order, must not overlap
	// each other or the rows held exactly.
	slices.SortFunc(l.hot, func(a, b hotRow) int { return cmp.Compare(a.first, b.first) })
	var cold []coldBlock
	for _, b := range l.cold {
		if b.n > 0 {
			cold = append(cold, b)
		}
	}
	prevLast := int64(-1)
	for _, b := range cold {
		if b.lo <= prevLast {
			c.dropHydration(t, newest, ReasonGap)
			return
		}
		prevLast = b.hi
	}
	for _, r := range l.hot {
		if r.first <= prevLast {
			c.dropHydration(t, newest, ReasonGap) // overlapping rows
			return
		}
		prevLast = r.first + int64(len(r.keys)) - 1
	}
	need := estimateFresh(l.hotN, len(l.hot)) + int64(cap(cold))*coldBlockBytes
	for i := range cold {
		need += cold[i].f.bytes()
	}
	if need > c.budget {
		c.dropHydration(t, newest, ReasonPressure)
		return
	}

	// Build the exact tier, still outside the lock. The keys go into the
	// map from the highest segment down, so that a later (lower)
	// occurrence simply overwrites: one map operation per hash.
	m := make(map[uint64]int64, l.hotN)
	b := &entry{m: m, hs: make([]uint64, l.hotN), segs: make([]seg, 0, len(l.hot))}
	for _, r := range l.hot {
		b.segs = append(b.segs, seg{first: r.first, created: r.created, n: int64(len(r.keys))})
	}
	pos := l.hotN
	for _, r := range slices.Backward(l.hot) {
		pos -= len(r.keys)
		copy(b.hs[pos:], r.keys)
		for _, k := range r.keys {
			b.addHashDown(k, r.first)
		}
	}
	b.peak = len(m)
	l.hot = nil

	windowNs := l.windowNs
	nextOffset := l.next
	e.mu.Lock()
	if !t.current() {
		e.mu.Unlock()
		return
	}
	if newest != noTime {
		e.seeTime(newest)
	}
	k := nextOffset - 1
	reason := ReasonNone
	slices.SortStableFunc(e.buf, func(x, y bufSeg) int { return cmp.Compare(x.first, y.first) })
	var merge []bufSeg
	for _, s := range e.buf {
		w := int64(s.window) * int64(time.Second)
		if w <= 0 || w > windowNs {
			reason = ReasonWindow
			break
		}
		windowNs = min(windowNs, w)
		last := s.first + int64(len(s.keys)) - 1
		if s.first < nextOffset {
			if last >= nextOffset {
				reason = ReasonGap // straddles the snapshot: impossible
				break
			}
			continue // in the snapshot already
		}
		if s.first != k+1 {
			reason = ReasonGap
			break
		}
		merge = append(merge, s)
		k = last
	}
	switch reason {
	case ReasonGap:
		e.dropGap()
	case ReasonWindow:
		e.release(ReasonWindow, 0)
	default:
		e.m, e.peak, e.churned = b.m, b.peak, false
		e.multi, e.multiPeak = b.multi, b.multiPeak
		e.hs, e.hHead = b.hs, 0
		e.segs, e.sHead = b.segs, 0
		e.cold = cold
		e.k = nextOffset - 1
		e.windowNs = windowNs
		e.newest = newest
		e.buf, e.bufBytes = nil, 0
		e.okLearns = 0
		e.tomb = ReasonNone
		e.st.Store(uint32(stateKnown))
		for _, s := range merge {
			e.addSegKeys(s.first, s.created, s.keys)
		}
		e.trim()
		e.freeze()
	}
	e.publish()
	e.mu.Unlock()
	c.sync(e)
}

// dropHydration ends hydration t without installing anything.
func (c *Cache) dropHydration(t HydrateToken, newest int64, r Reason) {
	e := t.e
	e.mu.Lock()
	if !t.current() {
		e.mu.Unlock()
		return
	}
	if newest != noTime {
		e.seeTime(newest)
	}
	switch r {
	case ReasonGap:
		e.dropGap()
	case ReasonPressure:
		e.release(ReasonPressure, 0)
	default:
		e.release(r, 0)
	}
	e.publish()
	e.mu.Unlock()
	if r != ReasonPressure {
		c.sync(e)
		return
	}
	// Too big: forget the entry, remember the partition in tooBig.
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.lru.Peek(e.key); ok && cur == e {
		c.lru.Remove(e.key)
		c.removeLocked(e)
	}
	c.markTooBigLocked(e.key, e.clock.Load())
}
