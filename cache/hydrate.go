package cache

import (
	"cmp"
	"slices"
	"time"
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
			e = &entry{key: p, gen: 1, k: -1, newest: noTime, notBefore: noTime}
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
// the slices are copied, the caller keeps them). windowSeconds is the
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

	// Validate and size the snapshot outside the lock: the actor keeps
	// buffering Learns meanwhile.
	windowNs := int64(windowSeconds) * int64(time.Second)
	newest := int64(noTime)
	if !dbNow.IsZero() {
		newest = dbNow.UnixNano()
	}
	for i := range rows {
		if ts := rows[i].CreatedAt.UnixNano(); ts > newest {
			newest = ts
		}
	}
	cutoff := int64(noTime)
	if newest != noTime {
		cutoff = newest - windowNs - marginNs
	}
	order := make([]int, 0, len(rows))
	for i := range rows {
		if len(rows[i].Hashes) > 0 {
			order = append(order, i)
		}
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(rows[a].FirstOffset, rows[b].FirstOffset) })
	consistent := windowNs > 0 && nextOffset >= 0
	prevLast := int64(-1)
	nh, ns := 0, 0
	for _, i := range order {
		r := &rows[i]
		last := r.FirstOffset + int64(len(r.Hashes)) - 1
		if r.FirstOffset <= prevLast || r.FirstOffset < 0 || last >= nextOffset {
			consistent = false // overlapping rows, or rows past next_offset
			break
		}
		prevLast = last
		if r.CreatedAt.UnixNano() >= cutoff {
			nh += len(r.Hashes)
			ns++
		}
	}
	if !consistent {
		reason := ReasonGap
		if windowNs <= 0 {
			reason = ReasonWindow
		}
		c.dropHydration(t, newest, reason)
		return
	}
	if estimateFresh(nh, ns) > c.budget {
		c.dropHydration(t, newest, ReasonPressure)
		return
	}

	// Build the partition's structures, still outside the lock. The keys
	// go into the map from the highest segment down, so that a later
	// (lower) occurrence simply overwrites: one map operation per hash.
	m := make(map[uint64]int64, nh)
	b := &entry{m: m, hs: make([]uint64, nh), segs: make([]seg, 0, ns)}
	for _, i := range order {
		r := &rows[i]
		created := r.CreatedAt.UnixNano()
		if created < cutoff {
			continue
		}
		b.segs = append(b.segs, seg{first: r.FirstOffset, created: created, n: int64(len(r.Hashes))})
	}
	pos := nh
	for _, i := range slices.Backward(order) {
		r := &rows[i]
		if r.CreatedAt.UnixNano() < cutoff {
			continue
		}
		pos -= len(r.Hashes)
		for i := range r.Hashes {
			k := hashKey(&r.Hashes[i])
			b.hs[pos+i] = k
			b.addHashDown(k, r.FirstOffset)
		}
	}
	b.peak = len(m)

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
