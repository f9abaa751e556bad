package cache

import (
	"encoding/binary"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// TrimMargin is added to the window before an entry is trimmed. Trimming is
// measured against the newest createdAt the partition has seen (the
// database's clock), so the margin only has to absorb the database clock
// stepping back and transactions whose start time (created_at = now()) is
// older than that of a transaction that committed before them.
const TrimMargin = 60 * time.Second

const marginNs = int64(TrimMargin)

// noTime marks "no database time seen yet".
const noTime = math.MinInt64

// hashKey is what the cache holds of a 16-byte hash: its two 8-byte halves
// XORed. Two different hashes may share a key; the cache then treats them as
// occurrences of one hash, which only lowers a watermark (below the segment
// of the other hash) and can only overstate WatermarkFound's count, a
// prediction the database's probe checks anyway. So the promise "no hash of
// the batch occurs at or below W" stays exact, at half the memory of the
// full hash in the map and the time-ordered slice.
func hashKey(h *[16]byte) uint64 {
	return binary.LittleEndian.Uint64(h[:8]) ^ binary.LittleEndian.Uint64(h[8:])
}

// Memory model (see estimate). The numbers were measured on Go 1.26 (swiss
// tables) with runtime.MemStats and are pinned by TestByteAccounting.
const (
	// hashBytes is one element of the time-ordered key slice.
	hashBytes = 8
	// segBytes is one element of the segment slice (unsafe.Sizeof(seg{})).
	segBytes = int64(unsafe.Sizeof(seg{}))
	// mapSlotBytes is one slot of map[uint64]int64: 8 B key + 8 B value
	// + 1 control byte, times 1.06 for the size-class rounding of a
	// 1024-slot table (17408 B rounded up to 18432 B).
	mapSlotBytes = 18
	// multiSlotBytes is one slot of map[uint64]int32 (8+4 padded to 16,
	// +1, rounded).
	multiSlotBytes = 18
	// entryOverhead covers the entry struct, its LRU list element, its slot
	// in the LRU's own map and the header of its hash map (48 B, allocated
	// even while empty).
	entryOverhead = int64(unsafe.Sizeof(entry{})) + 160 + mapHeaderBytes
	// mapHeaderBytes is a Go map's header; mapTableBytes the table header
	// and directory a map allocates once it outgrows its first 8 slots.
	mapHeaderBytes = 48
	mapTableBytes  = 48
	// bufSegOverhead is a buffered Learn's header and slice header.
	bufSegOverhead = int64(unsafe.Sizeof(bufSeg{}))
)

// mapBytes estimates the memory of a Go map with slotBytes per slot that
// has held at most peak keys. A map that only grew is sized by its load
// factor (at most 7/8, so nextPow2(peak*8/7) slots). A map that also deleted
// keeps tombstones and settles, under the sliding-window churn the cache
// produces, at nextPow2(2*peak) slots (measured: 55-110 B per live entry
// for map[uint64]int64). Go maps never shrink; rebuildMap resets peak.
func mapBytes(peak int, churned bool, slotBytes int64) int64 {
	if peak <= 0 {
		return 0
	}
	want := (peak*8 + 6) / 7
	if churned {
		want = 2 * peak
	}
	slots := 8
	for slots < want {
		slots <<= 1
	}
	b := int64(slots) * slotBytes
	if slots > 8 {
		b += mapTableBytes
	}
	return b
}

// seg is one committed segment held by a known partition: its hashes are
// hs[h : h+n] where h is the sum of n over the segments before it.
type seg struct {
	first   int64 // first offset of the segment (the log_txns row's key)
	created int64 // created_at, unix nanoseconds on the database clock
	n       int64 // number of hashes
}

// bufSeg is a Learn that arrived while the partition was hydrating.
type bufSeg struct {
	first   int64
	created int64
	window  int
	keys    []uint64
}

type state uint32

const (
	stateHydrating state = iota + 1
	stateKnown
	stateTomb // dropped: holds no hashes, only why and the re-load backoff
)

// entry is the cache's state for one partition. Only the partition's actor
// and its hydration loader touch it, under mu; eviction and Stats, which
// cross partitions, use the atomics and the fields guarded by Cache.mu.
type entry struct {
	key [16]byte

	// Guarded by Cache.mu.
	acct int64 // bytes accounted in Cache.bytes
	// dead is set (under Cache.mu) when the entry leaves the index. A dead
	// entry is never revived: a new entry replaces it.
	dead atomic.Bool

	// Written under mu, read by anyone.
	st   atomic.Uint32 // state
	size atomic.Int64  // latest estimate()
	live atomic.Int64  // hashes held
	// coldN and coldBytes: hashes held in filter blocks, and their filters'
	// memory.
	coldN, coldBytes atomic.Int64
	clock            atomic.Int64 // newest database time seen in any state

	mu sync.Mutex

	// Tombstone.
	tomb      Reason
	notBefore int64 // BeginHydrate is refused while clock < notBefore
	strikes   uint8 // consecutive gaps, for the backoff
	okLearns  int   // clean appends since the last install

	// Hydrating.
	gen      uint64
	buf      []bufSeg
	bufBytes int64

	// Known: every hash of every committed segment at offsets <= k whose
	// created_at is >= newest - window - TrimMargin is in m.
	k        int64
	windowNs int64
	newest   int64
	// m maps a hash's key (hashKey) to the first offset of the lowest
	// segment holding it.
	m       map[uint64]int64
	peak    int  // most keys m has held since it was made
	churned bool // m has deleted keys (tombstones)
	// multi counts, for a hash held in more than one segment, the extra
	// occurrences (rare: a hash re-pushed after its window closed, or
	// written while deduplication was off).
	multi     map[uint64]int32
	multiPeak int
	hs        []uint64 // hash keys in offset order; hs[hHead:] are live
	hHead     int
	segs      []seg // segments in offset order; segs[sHead:] are live
	sHead     int
	// cold holds, as filters, the older segments below segs[sHead] (in
	// offset order, oldest first): once more than hotMax hashes are held
	// exactly, the oldest segments are frozen into the newest block.
	cold []coldBlock
	// hotMax is Config.HotHashes: the most hashes held in m.
	hotMax int
}

// coldBlock is a run of a partition's consecutive segments whose hashes are
// held only as a Bloom filter: every hash of its segments (from offset lo to
// hi) tests present. A hash that tests present lowers the watermark below
// lo; one that tests absent is in none of its segments.
type coldBlock struct {
	lo, hi int64 // the first offset of its first segment, the last of its last
	newest int64 // the newest created_at of its segments
	n, cap int   // keys added, keys it is sized for
	f      bloom
}

// coldBlockBytes is a block's struct (its filter's header included), as
// held in entry.cold.
const coldBlockBytes = int64(unsafe.Sizeof(coldBlock{}))

func (e *entry) state() state { return state(e.st.Load()) }

// publish refreshes the atomics read outside mu. Call it under mu after any
// change.
func (e *entry) publish() {
	e.size.Store(e.estimate())
	n, b := 0, int64(0)
	for i := range e.cold {
		n += e.cold[i].n
		b += e.cold[i].f.bytes()
	}
	e.coldN.Store(int64(n))
	e.coldBytes.Store(b)
	e.live.Store(int64(len(e.hs) - e.hHead + n))
}

// estimate is the memory the entry holds, in bytes:
//
//	entryOverhead                            struct, LRU element and slot, map header
//	+ mapBytes(peak, churned, 27)            the hash -> offset map (slots, table header)
//	+ mapBytes(multiPeak, true, 28)          repeated hashes (usually none)
//	+ 8*cap(hs) + 24*cap(segs)               the time-ordered slices, at capacity
//	+ buffered Learns during hydration (8*cap(keys) + 48 each)
func (e *entry) estimate() int64 {
	b := entryOverhead
	b += mapBytes(e.peak, e.churned, mapSlotBytes)
	b += mapBytes(e.multiPeak, true, multiSlotBytes)
	b += int64(cap(e.hs))*hashBytes + int64(cap(e.segs))*segBytes
	b += e.bufBytes
	b += int64(cap(e.cold)) * coldBlockBytes
	for i := range e.cold {
		b += e.cold[i].f.bytes()
	}
	return b
}

// coldHashes is the number of hashes held in filters.
func (e *entry) coldHashes() int {
	n := 0
	for i := range e.cold {
		n += e.cold[i].n
	}
	return n
}

// estimateFresh is estimate for a partition about to be built from nh hashes
// in ns segments.
func estimateFresh(nh, ns int) int64 {
	return entryOverhead + mapBytes(nh, false, mapSlotBytes) + int64(nh)*hashBytes + int64(ns)*segBytes
}

// seeTime advances the partition's view of the database clock.
func (e *entry) seeTime(t int64) {
	if t > e.clock.Load() {
		e.clock.Store(t)
	}
}

// release drops everything the partition holds and makes it a tombstone.
// backoff > 0 refuses re-hydration until the database clock (as seen by
// Learn) has advanced that far.
func (e *entry) release(r Reason, backoff time.Duration) {
	e.tomb = r
	e.m, e.multi = nil, nil
	e.peak, e.multiPeak, e.churned = 0, 0, false
	e.hs, e.hHead = nil, 0
	e.segs, e.sHead = nil, 0
	e.cold = nil
	e.buf, e.bufBytes = nil, 0
	e.k = -1
	e.notBefore = noTime
	if backoff > 0 {
		if c := e.clock.Load(); c != noTime {
			e.notBefore = c + int64(backoff)
		}
	}
	e.st.Store(uint32(stateTomb))
}

// gapBackoff is the re-hydration backoff after the strikes-th consecutive
// gap: 1 s, 2 s, 4 s, ... capped at 5 min of database time.
func gapBackoff(strikes uint8) time.Duration {
	d := time.Second << min(strikes-1, 9)
	return min(d, 5*time.Minute)
}

func (e *entry) dropGap() {
	if e.strikes < math.MaxUint8 {
		e.strikes++
	}
	e.release(ReasonGap, gapBackoff(e.strikes))
}

// hydrateAllowed reports whether a tombstone may be re-loaded now.
func (e *entry) hydrateAllowed() bool {
	return e.notBefore == noTime || e.clock.Load() >= e.notBefore
}

// addSeg appends a segment to a known partition. The caller has checked
// that it starts at k+1.
func (e *entry) addSeg(first, created int64, hashes [][16]byte) {
	e.hs, e.hHead = fifoReserve(e.hs, e.hHead, len(hashes))
	for i := range hashes {
		k := hashKey(&hashes[i])
		e.hs = append(e.hs, k)
		e.addHash(k, first)
	}
	e.endSeg(first, created, int64(len(hashes)))
}

// addSegKeys is addSeg for keys already computed (a buffered Learn).
func (e *entry) addSegKeys(first, created int64, keys []uint64) {
	e.hs, e.hHead = fifoAppend(e.hs, e.hHead, keys)
	for _, k := range keys {
		e.addHash(k, first)
	}
	e.endSeg(first, created, int64(len(keys)))
}

// endSeg records the segment whose n keys addSeg appended.
func (e *entry) endSeg(first, created, n int64) {
	one := [1]seg{{first: first, created: created, n: n}}
	e.segs, e.sHead = fifoAppend(e.segs, e.sHead, one[:])
	e.k = first + n - 1
	if created > e.newest {
		e.newest = created
	}
	e.seeTime(created)
}

func (e *entry) addHash(h uint64, first int64) {
	if o, ok := e.m[h]; ok {
		if e.multi == nil {
			e.multi = make(map[uint64]int32)
		}
		e.multi[h]++
		e.multiPeak = max(e.multiPeak, len(e.multi))
		if first < o {
			e.m[h] = first
		}
		return
	}
	e.m[h] = first
	e.peak = max(e.peak, len(e.m))
}

// addHashDown is addHash for a partition being built from its highest
// segment down: first is at or below every occurrence added so far, so it
// overwrites. The caller sets peak once done.
func (e *entry) addHashDown(h uint64, first int64) {
	n := len(e.m)
	e.m[h] = first
	if len(e.m) == n {
		if e.multi == nil {
			e.multi = make(map[uint64]int32)
		}
		e.multi[h]++
		e.multiPeak = max(e.multiPeak, len(e.multi))
	}
}

// dropHash removes one occurrence of h. When other occurrences remain the
// map keeps the lower (trimmed) offset: still at or below every remaining
// occurrence, so the watermark stays below all of them.
func (e *entry) dropHash(h uint64) {
	if c, ok := e.multi[h]; ok {
		if c <= 1 {
			delete(e.multi, h)
			if len(e.multi) == 0 {
				e.multi, e.multiPeak = nil, 0
			}
		} else {
			e.multi[h] = c - 1
		}
		return
	}
	delete(e.m, h)
	e.churned = true
}

// trim drops, from the front, the segments whose created_at is older than
// newest - window - TrimMargin. Amortised O(1) per hash ever added.
func (e *entry) trim() {
	if e.newest == noTime {
		return
	}
	cutoff := e.newest - e.windowNs - marginNs
	// A filter goes whole, once its newest segment is out of the window.
	nc := 0
	for nc < len(e.cold) && e.cold[nc].newest < cutoff {
		nc++
	}
	if nc > 0 {
		e.cold = append(e.cold[:0], e.cold[nc:]...)
		clear(e.cold[len(e.cold):cap(e.cold)])
		if len(e.cold) == 0 {
			e.cold = nil
		}
	}
	for e.sHead < len(e.segs) {
		s := e.segs[e.sHead]
		if s.created >= cutoff {
			break
		}
		end := e.hHead + int(s.n)
		for _, h := range e.hs[e.hHead:end] {
			e.dropHash(h)
		}
		e.hHead = end
		e.sHead++
	}
	e.hs, e.hHead = fifoShrink(e.hs, e.hHead)
	e.segs, e.sHead = fifoShrink(e.segs, e.sHead)
	e.rebuildMapIfSparse()
}

// watermark computes W for a known partition: k, lowered below the segment
// of every batch hash it holds. It returns the number of hashes found.
//
// Every hash is also tested against every filter block: one that tests
// present lowers W below the lowest such block (cold reports that one did)
// and counts as found, like a held hash: a likely duplicate (or the
// filter's false positive, which only costs a longer probe). A hash can be
// in the map at a newer segment and in a block too (pushed again after an
// older occurrence was frozen: another writer, a window switched off and
// on), so the blocks are tested whatever the map says. exact counts the
// hashes found in the map and in no block: only for those is the map's
// offset the lowest occurrence.
func (e *entry) watermark(hashes [][16]byte) (w int64, found, exact int, cold bool) {
	w = e.k
	for i := range hashes {
		k := hashKey(&hashes[i])
		o, held := e.m[k]
		if held && o <= w {
			w = o - 1
		}
		hit := false
		if len(e.cold) > 0 {
			h1, h2 := mixes(k)
			for j := range e.cold {
				if b := &e.cold[j]; b.f.hasMixes(h1, h2) {
					hit = true
					w = min(w, b.lo-1)
				}
			}
		}
		switch {
		case hit:
			found++
			cold = true
		case held:
			found++
			exact++
		}
	}
	return w, found, exact, cold
}

// freeze moves the oldest segments held exactly into filter blocks while
// more than hotMax hashes are held exactly, down to three quarters of
// hotMax. The map keeps only what is frozen out of it (dropHash), so a hash
// held in a block and again in a later segment keeps the lower offset.
func (e *entry) freeze() {
	live := len(e.hs) - e.hHead
	if e.hotMax <= 0 || live <= e.hotMax {
		return
	}
	target := e.hotMax - e.hotMax/4
	for live > target && e.sHead < len(e.segs) {
		s := e.segs[e.sHead]
		keys := e.hs[e.hHead : e.hHead+int(s.n)]
		b := e.coldFor(len(keys))
		for _, k := range keys {
			b.f.add(k)
			e.dropHash(k)
		}
		e.extendCold(b, s, len(keys))
		e.hHead += int(s.n)
		e.sHead++
		live -= int(s.n)
	}
	e.hs, e.hHead = fifoShrink(e.hs, e.hHead)
	e.segs, e.sHead = fifoShrink(e.segs, e.sHead)
	e.rebuildMapIfSparse()
}

// coldFor returns the block the next n keys are frozen into: the newest if
// it has room, else a new one sized for a sixteenth of what the partition
// holds in filters (at least hotMax and n). The block being filled is
// allocated whole, so a smaller one wastes less (on average half of it is
// empty: 3% of a window here), and more blocks cost a test each per batch
// hash and add their false positives: a deep window is held in about
// sixteen.
func (e *entry) coldFor(n int) *coldBlock {
	if l := len(e.cold); l > 0 && e.cold[l-1].n+n <= e.cold[l-1].cap {
		return &e.cold[l-1]
	}
	c := max(e.hotMax, e.coldHashes()/16, n)
	e.cold = append(e.cold, coldBlock{lo: -1, newest: noTime, cap: c, f: newBloom(c)})
	return &e.cold[len(e.cold)-1]
}

// extendCold records that block b now also holds segment s (n keys).
func (e *entry) extendCold(b *coldBlock, s seg, n int) {
	if b.lo < 0 {
		b.lo = s.first
	}
	b.hi = s.first + s.n - 1
	b.newest = max(b.newest, s.created)
	b.n += n
}

// rebuildMapIfSparse rebuilds m once three quarters of its peak is gone: Go
// maps never give memory back (O(live), paid for by the deletions since the
// last rebuild).
func (e *entry) rebuildMapIfSparse() {
	if e.peak > 128 && len(e.m)*4 < e.peak {
		m := make(map[uint64]int64, len(e.m))
		maps.Copy(m, e.m)
		e.m, e.peak, e.churned = m, len(m), false
	}
}

// fifoAppend appends add to the queue s[head:], sliding the live part to the
// front instead of growing when at least a quarter of the capacity is dead.
// It grows a small queue by 2x and a large one by 1.25x: a freshly loaded
// partition's queue is exactly full, and doubling it at its first append
// would add half again to the memory of a large window for nothing.
func fifoAppend[T any](s []T, head int, add []T) ([]T, int) {
	s, head = fifoReserve(s, head, len(add))
	return append(s, add...), head
}

// fifoReserve makes room in the queue s[head:] for n more elements (as
// fifoAppend), so that appending them does not reallocate.
func fifoReserve[T any](s []T, head, n int) ([]T, int) {
	if len(s)+n > cap(s) {
		live := len(s) - head
		need := live + n
		if head > 0 && need <= cap(s)*3/4 {
			s = s[:copy(s, s[head:])]
		} else {
			ns := make([]T, live, fifoGrow(need))
			copy(ns, s[head:])
			s = ns
		}
		head = 0
	}
	return s, head
}

// fifoGrow is the capacity a queue that must hold need elements grows to.
func fifoGrow(need int) int {
	if need < 4096 {
		return max(2*need, 4)
	}
	return need + need/4
}

// fifoShrink reallocates the queue when its live part is under a third of
// its capacity, and rewinds it when empty.
func fifoShrink[T any](s []T, head int) ([]T, int) {
	live := len(s) - head
	if live == 0 {
		if cap(s) > 64 {
			return nil, 0
		}
		return s[:0], 0
	}
	if cap(s) > 64 && live < cap(s)/3 {
		ns := make([]T, live, max(2*live, 16))
		copy(ns, s[head:])
		return ns, 0
	}
	return s, head
}
