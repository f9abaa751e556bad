package cache

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The model-based test simulates the database (a log of committed segments
// per partition, an offset allocator, the queue's window and a database
// clock), this broker's actor (Watermark, push, Learn, hydration with its
// loader racing the pushes), a second writer that appends without telling
// the cache, window reconfiguration, Forget and a budget small enough to
// evict. After every push it checks the cache's promise and that the probe
// the watermark allows returns exactly what a full-window probe returns.

type mSeg struct {
	first   int64
	created int64
	hashes  [][16]byte
}

type mHyd struct {
	tok    HydrateToken
	snap   bool
	next   int64
	window int
	now    int64
	rows   []Segment
}

type mPart struct {
	id       [16]byte
	log      []mSeg
	next     int64
	window   int // the queue's window in the database
	hint     int // the actor's belief
	universe [][16]byte
	hyd      *mHyd
	index    map[[16]byte][]int // hash -> indexes into log, ascending
}

type model struct {
	t      *testing.T
	rng    *rand.Rand
	c      *Cache
	budget int64
	now    int64 // database clock, unix nanoseconds
	maxNow int64 // the clock's high-water mark
	parts  []*mPart

	pushes, watermarks, vouched, lowered int
}

var modelWindows = []int{0, 5, 20, 60, 300}

func randHash(rng *rand.Rand) (h [16]byte) {
	for i := 0; i < 16; i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			h[i+j] = byte(v >> (8 * j))
		}
	}
	return h
}

func newModel(t *testing.T, seed uint64, budget int64, enabled bool) *model {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m := &model{t: t, rng: rng, budget: budget, now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano(),
		c: New(Config{Enabled: enabled, BudgetBytes: budget, MaxSpan: maxSpanFor(seed), HotHashes: hotHashesFor(seed)})}
	for i := range 5 {
		p := &mPart{window: 60, hint: 60, index: make(map[[16]byte][]int)}
		p.id[0], p.id[15] = byte(i+1), 0xAA
		for range 40 + rng.IntN(80) {
			p.universe = append(p.universe, randHash(rng))
		}
		m.parts = append(m.parts, p)
	}
	return m
}

// batch draws distinct hashes: mostly from the partition's universe (so
// duplicates are frequent), some fresh.
func (m *model) batch(p *mPart, n int) [][16]byte {
	seen := make(map[[16]byte]bool, n)
	out := make([][16]byte, 0, n)
	for len(out) < n {
		var h [16]byte
		if m.rng.IntN(5) == 0 {
			h = randHash(m.rng)
		} else {
			h = p.universe[m.rng.IntN(len(p.universe))]
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out
}

// probe is the SQL probe: for each batch hash, the first offset of the
// lowest segment with first_offset > w and created_at > now - window that
// holds it, or -1.
func (m *model) probe(p *mPart, batch [][16]byte, w int64, window int) []int64 {
	out := make([]int64, len(batch))
	lo := m.now - int64(window)*int64(time.Second)
	for i, h := range batch {
		out[i] = -1
		for _, j := range p.index[h] {
			if s := &p.log[j]; s.first > w && s.created > lo {
				out[i] = s.first
				break
			}
		}
	}
	return out
}

// checkSafe asserts the cache's promise for a watermark it returned: no
// batch hash in a segment starting at or below w that is inside the window
// the caller passed, as of the database's current time.
func (m *model) checkSafe(p *mPart, batch [][16]byte, w int64, window int, what string) {
	if w < 0 {
		return
	}
	lo := m.now - int64(window)*int64(time.Second)
	for _, h := range batch {
		for _, j := range p.index[h] {
			if s := &p.log[j]; s.first <= w && s.created > lo {
				m.t.Fatalf("%s: watermark %d is unsafe: hash %x is in segment %d (created %v before now, window %ds)",
					what, w, h[:4], s.first, time.Duration(m.now-s.created), window)
			}
		}
	}
}

func (m *model) commit(p *mPart, hashes [][16]byte, created int64) int64 {
	first := p.next
	for _, h := range hashes {
		p.index[h] = append(p.index[h], len(p.log))
	}
	p.log = append(p.log, mSeg{first: first, created: created, hashes: hashes})
	p.next += int64(len(hashes))
	return first
}

// push is one push of this broker's actor.
func (m *model) push(p *mPart) {
	batch := m.batch(p, 1+m.rng.IntN(12))
	for attempt := 0; ; attempt++ {
		require.Less(m.t, attempt, 3)
		if (p.hint == 0) != (p.window == 0) {
			p.hint = p.window // window_changed: nothing written, retry
			continue
		}
		break
	}
	m.pushes++
	r := ReasonWindow
	keep := batch
	if p.hint > 0 {
		var w int64
		w, r = m.c.Watermark(p.id, p.hint, batch)
		m.watermarks++
		if r != ReasonNone {
			require.Equal(m.t, NoWatermark, w)
		}
		if w >= 0 {
			m.vouched++
		}
		m.checkSafe(p, batch, w, p.hint, "push")
		// push_segment: the watermark applies only if the queue's window is
		// not larger than the hint it came with.
		eff := w
		if p.window > p.hint {
			eff = NoWatermark
		}
		got := m.probe(p, batch, eff, p.window)
		want := m.probe(p, batch, NoWatermark, p.window)
		require.Equal(m.t, want, got, "the watermark changed a verdict (w=%d eff=%d)", w, eff)
		keep = keep[:0:0]
		for i, o := range got {
			if o < 0 {
				keep = append(keep, batch[i])
			} else if w >= 0 {
				m.lowered++
			}
		}
	}
	p.hint = p.window
	if len(keep) > 0 {
		first := m.commit(p, keep, m.now)
		if m.rng.IntN(40) != 0 { // else: outcome lost, the actor never learns it
			m.c.Learn(p.id, p.window, first, keep, time.Unix(0, m.now))
		}
	}
	switch r {
	case ReasonUnknown, ReasonGap, ReasonPressure, ReasonWindow, ReasonClock:
		if p.hyd == nil && p.hint > 0 && m.rng.IntN(2) == 0 {
			if tok, ok := m.c.BeginHydrate(p.id); ok {
				p.hyd = &mHyd{tok: tok}
			}
		}
	}
}

// otherWriter is a second broker (or the transaction endpoint) appending to
// the partition without telling the cache. It deduplicates through the full
// probe, except sometimes (as if deduplication had been off), which puts the
// same hash in several in-window segments.
func (m *model) otherWriter(p *mPart) {
	batch := m.batch(p, 1+m.rng.IntN(6))
	keep := batch
	if p.window > 0 && m.rng.IntN(4) != 0 {
		keep = nil
		for i, o := range m.probe(p, batch, NoWatermark, p.window) {
			if o < 0 {
				keep = append(keep, batch[i])
			}
		}
	}
	if len(keep) > 0 {
		// Its transaction started a little earlier than now.
		m.commit(p, keep, m.now-m.rng.Int64N(int64(2*time.Second)))
	}
}

// hydrateStep advances p's loader: take the snapshot, then finish or abort.
func (m *model) hydrateStep(p *mPart) {
	h := p.hyd
	if !h.snap {
		h.snap, h.next, h.window, h.now = true, p.next, p.window, m.now
		lo := m.now - int64(p.window)*int64(time.Second) - int64(TrimMargin)
		for _, s := range p.log {
			if s.created > lo {
				h.rows = append(h.rows, Segment{FirstOffset: s.first, CreatedAt: time.Unix(0, s.created),
					Hashes: append([][16]byte(nil), s.hashes...)})
			}
		}
		m.rng.Shuffle(len(h.rows), func(i, j int) { h.rows[i], h.rows[j] = h.rows[j], h.rows[i] })
		return
	}
	p.hyd = nil
	if m.rng.IntN(8) == 0 {
		m.c.AbortHydrate(h.tok)
		return
	}
	if m.rng.IntN(2) == 0 {
		m.c.FinishHydrate(h.tok, h.next, h.window, time.Unix(0, h.now), h.rows)
		return
	}
	// Row by row, as the broker's loads run, with a depth estimate that
	// may be wrong (sqlstore.SidecarDepth is read before the snapshot).
	depth := int64(0)
	for _, r := range h.rows {
		depth = max(depth, h.next-r.FirstOffset)
	}
	switch m.rng.IntN(4) {
	case 0:
		depth /= 3
	case 1:
		depth *= 3
	case 2:
		depth = 0
	}
	l := m.c.NewLoad(h.tok, h.next, h.window, time.Unix(0, h.now), depth)
	for _, r := range h.rows {
		l.Add(r.FirstOffset, r.CreatedAt, r.Hashes)
	}
	l.Finish()
}

// checkInternal verifies the "known up to K" invariant of every known
// partition against the log, and the byte accounting.
func (m *model) checkInternal() {
	c := m.c
	c.mu.Lock()
	entries := c.lru.Values()
	var sum int64
	for _, e := range entries {
		sum += e.acct
	}
	require.Equal(m.t, sum, c.bytes, "accounted bytes")
	require.LessOrEqual(m.t, c.bytes, m.budget, "over budget")
	c.mu.Unlock()
	for _, e := range entries {
		e.mu.Lock()
		require.Equal(m.t, e.size.Load(), e.estimate())
		if e.state() == stateKnown {
			var p *mPart
			for _, q := range m.parts {
				if q.id == e.key {
					p = q
				}
			}
			cutoff := e.newest - e.windowNs - marginNs
			for _, s := range slices.Backward(p.log) {
				if s.created < cutoff-int64(time.Minute) {
					break // created_at is only roughly ordered; a minute covers the jitter
				}
				if s.first > e.k || s.created < cutoff {
					continue
				}
				for _, h := range s.hashes {
					k := hashKey(&h)
					o, ok := e.m[k]
					held := ok && o <= s.first
					for _, b := range e.cold {
						held = held || (b.lo <= s.first && b.f.has(k))
					}
					require.True(m.t, held, "known up to %d but hash of segment %d missing", e.k, s.first)
				}
			}
			require.Equal(m.t, len(e.hs)-e.hHead, int(sumSegs(e.segs[e.sHead:])))
			require.LessOrEqual(m.t, len(e.hs)-e.hHead, e.hotMax, "more hashes held exactly than HotHashes")
			for i, b := range e.cold {
				require.LessOrEqual(m.t, b.lo, b.hi)
				if i+1 < len(e.cold) {
					require.Less(m.t, b.hi, e.cold[i+1].lo, "filter blocks overlap")
				} else if e.sHead < len(e.segs) {
					require.Less(m.t, b.hi, e.segs[e.sHead].first, "a filter block overlaps the exact segments")
				}
			}
		}
		e.mu.Unlock()
	}
}

func sumSegs(s []seg) (n int64) {
	for _, x := range s {
		n += x.n
	}
	return n
}

func (m *model) step() {
	p := m.parts[m.rng.IntN(len(m.parts))]
	switch k := m.rng.IntN(100); {
	case k < 45:
		m.push(p)
	case k < 60:
		// Partitions 0 and 1 only ever see this broker's writes.
		if p.id[0] > 2 {
			m.otherWriter(p)
		} else {
			m.push(p)
		}
	case k < 80:
		if p.hyd != nil {
			m.hydrateStep(p)
		} else {
			m.push(p)
		}
	case k < 82:
		m.c.Forget(p.id)
	case k < 84:
		p.window = modelWindows[m.rng.IntN(len(modelWindows))]
	default:
		// Spot check with a random batch, no push.
		if p.hint > 0 {
			b := m.batch(p, 1+m.rng.IntN(8))
			w, _ := m.c.Watermark(p.id, p.hint, b)
			m.checkSafe(p, b, w, p.hint, "spot")
		}
	}
	// The database clock moves on and occasionally steps back, never more
	// than 30 s below its high-water mark (the documented assumption is
	// TrimMargin, 60 s).
	if m.rng.IntN(50) == 0 {
		m.now = max(m.now-m.rng.Int64N(int64(30*time.Second)), m.maxNow-int64(30*time.Second))
	} else {
		m.now += m.rng.Int64N(int64(4 * time.Second))
	}
	m.maxNow = max(m.maxNow, m.now)
}

func TestModelRandomized(t *testing.T) {
	t.Parallel()
	budgets := []int64{3 << 10, 24 << 10, 96 << 10, 8 << 20}
	for seed := uint64(1); seed <= 12; seed++ {
		budget := budgets[seed%uint64(len(budgets))]
		t.Run(fmt.Sprintf("seed%d_budget%d", seed, budget), func(t *testing.T) {
			t.Parallel()
			m := newModel(t, seed, budget, true)
			steps := 6000
			if testing.Short() {
				steps = 1500
			}
			for range steps {
				m.step()
				m.checkInternal()
			}
			st := m.c.Stats()
			t.Logf("pushes=%d watermarks=%d vouched=%d lowered=%d stats=%+v", m.pushes, m.watermarks, m.vouched, m.lowered, st)
			require.Positive(t, m.pushes)
			if budget >= 24<<10 {
				require.Positive(t, m.vouched, "the cache never vouched: the test exercises nothing")
				require.Positive(t, m.lowered, "no duplicate was found below K")
			}
			hot := hotHashesFor(seed)
			if budget <= 3<<10 || (budget <= 24<<10 && hot == DefaultHotHashes) {
				require.Positive(t, st.Evictions)
			}
			if hot < DefaultHotHashes && budget >= 24<<10 {
				require.Positive(t, st.ColdHits, "no watermark was lowered by a filter block: the test exercises none")
			}
		})
	}
}

func TestModelKillSwitch(t *testing.T) {
	t.Parallel()
	m := newModel(t, 7, 8<<20, false)
	for range 3000 {
		m.step()
		p := m.parts[m.rng.IntN(len(m.parts))]
		_, ok := m.c.BeginHydrate(p.id)
		require.False(t, ok)
		w, r := m.c.Watermark(p.id, 60, p.universe[:3])
		require.Equal(t, NoWatermark, w)
		require.Equal(t, ReasonDisabled, r)
	}
	st := m.c.Stats()
	require.Zero(t, st.Bytes)
	require.Zero(t, st.Partitions+st.Hydrating+st.Tombstones)
	require.Zero(t, st.Hits)
	require.Equal(t, st.Sentinels, st.SentinelsByReason["disabled"])
}

// maxSpanFor gives some seeds a small span cap, so the model also runs with
// ReasonSpan sentinels, and the others none.
func maxSpanFor(seed uint64) int64 {
	if seed%2 == 0 {
		return 16
	}
	return math.MaxInt64 / 2
}

// hotHashesFor gives most seeds a small exact tier, so the model runs with
// most of each window held in filter blocks (frozen by pushes, and built by
// loads), and the others the default, which holds all of it exactly.
func hotHashesFor(seed uint64) int {
	switch seed % 3 {
	case 0:
		return 6
	case 1:
		return 40
	default:
		return DefaultHotHashes
	}
}
