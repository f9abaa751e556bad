package cache

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at returns the database time t0 + sec seconds.
func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func pid(i int) (p [16]byte) {
	binary.BigEndian.PutUint64(p[8:], uint64(i))
	p[0] = 0xEE
	return p
}

// hashes returns n distinct hashes tagged with tag.
func hashes(tag uint32, n int) [][16]byte {
	out := make([][16]byte, n)
	for i := range out {
		binary.BigEndian.PutUint32(out[i][:4], tag)
		binary.BigEndian.PutUint64(out[i][4:12], uint64(i)*0x9e3779b97f4a7c15+1)
	}
	return out
}

// newCache returns a cache without the span cap, so tests can assert exact
// watermarks far below K; TestWatermarkSpanCap covers the cap.
func newCache(budget int64) *Cache {
	return New(Config{Enabled: true, BudgetBytes: budget, MaxSpan: math.MaxInt64 / 2})
}

func TestWatermarkSpanCap(t *testing.T) {
	t.Parallel()
	c := New(Config{Enabled: true, BudgetBytes: 1 << 20, MaxSpan: 100})
	p := [16]byte{1}
	tok, ok := c.BeginHydrate(p)
	require.True(t, ok)
	now := time.Unix(1_800_000_000, 0)
	c.FinishHydrate(tok, 0, 3600, now, nil)
	old, recent := [16]byte{2}, [16]byte{3}
	c.Learn(p, 3600, 0, [][16]byte{old}, now)
	filler := make([][16]byte, 200)
	for i := range filler {
		filler[i] = [16]byte{9, byte(i), byte(i >> 8)}
	}
	c.Learn(p, 3600, 1, filler, now)
	c.Learn(p, 3600, 201, [][16]byte{recent}, now)
	// K is 201. A repeat of the id at offset 201 lowers W to 200: fine.
	w, r := c.Watermark(p, 3600, [][16]byte{recent})
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(200), w)
	// A repeat of the id at offset 0 would make the probe cover 201 offsets.
	w, r = c.Watermark(p, 3600, [][16]byte{old})
	require.Equal(t, ReasonSpan, r)
	require.Equal(t, NoWatermark, w)
	require.Equal(t, uint64(1), c.Stats().SentinelsByReason["span"])
}

// hydrate loads p from rows with next_offset next, at database time now.
func hydrate(t *testing.T, c *Cache, p [16]byte, next int64, window int, now time.Time, rows ...Segment) {
	t.Helper()
	tok, ok := c.BeginHydrate(p)
	require.True(t, ok)
	c.FinishHydrate(tok, next, window, now, rows)
}

func wm(c *Cache, p [16]byte, window int, hs ...[16]byte) (int64, Reason) {
	return c.Watermark(p, window, hs)
}

func TestReasonNames(t *testing.T) {
	t.Parallel()
	want := map[Reason]string{ReasonNone: "none", ReasonDisabled: "disabled", ReasonUnknown: "unknown",
		ReasonHydrating: "hydrating", ReasonGap: "gap", ReasonPressure: "pressure", ReasonWindow: "window",
		ReasonClock: "clock", ReasonSpan: "span", numReasons: "invalid"}
	for r, s := range want {
		require.Equal(t, s, r.String())
	}
}

func TestReasonDisabled(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Enabled: false, BudgetBytes: 1 << 20}, {Enabled: true, BudgetBytes: 0}} {
		c := New(cfg)
		_, ok := c.BeginHydrate(pid(1))
		require.False(t, ok)
		c.Learn(pid(1), 60, 0, hashes(1, 3), at(0))
		w, r := wm(c, pid(1), 60, hashes(1, 1)...)
		require.Equal(t, NoWatermark, w)
		require.Equal(t, ReasonDisabled, r)
		st := c.Stats()
		require.Zero(t, st.Bytes)
		require.Equal(t, uint64(1), st.SentinelsByReason["disabled"])
	}
}

func TestReasonUnknownAndLearnOnUnknown(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	c.Learn(pid(1), 60, 0, hashes(1, 3), at(0)) // not held: ignored
	w, r := wm(c, pid(1), 60, hashes(1, 1)...)
	require.Equal(t, NoWatermark, w)
	require.Equal(t, ReasonUnknown, r)
	require.Zero(t, c.Stats().Partitions)
}

func TestReasonHydratingAndKnown(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	tok, ok := c.BeginHydrate(p)
	require.True(t, ok)
	_, again := c.BeginHydrate(p)
	require.False(t, again, "already hydrating")
	_, r := wm(c, p, 60, hashes(1, 1)...)
	require.Equal(t, ReasonHydrating, r)

	old := hashes(1, 4)
	c.FinishHydrate(tok, 10, 60, at(10), []Segment{
		{FirstOffset: 6, CreatedAt: at(9), Hashes: old},
		{FirstOffset: 0, CreatedAt: at(1), Hashes: hashes(2, 6)},
	})
	_, again = c.BeginHydrate(p)
	require.False(t, again, "already held")

	w, r := wm(c, p, 60, hashes(9, 3)...)
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(9), w, "K = next_offset - 1")

	// A hash in the middle of the segment starting at 6 (frame offset 8):
	// the probe filters on the segment's first_offset, so W must be 5, not 7.
	w, r = wm(c, p, 60, hashes(9, 1)[0], old[2])
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(5), w)

	w, _ = wm(c, p, 60, old[3], hashes(2, 6)[5])
	require.Equal(t, NoWatermark, w, "a hash in the segment at offset 0 leaves nothing to vouch for")

	// A smaller window than the one covered is fine.
	w, r = wm(c, p, 30, hashes(9, 1)...)
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(9), w)

	st := c.Stats()
	require.Equal(t, 1, st.Partitions)
	require.Equal(t, int64(10), st.Hashes)
	require.Equal(t, uint64(4), st.Hits)
	require.Equal(t, uint64(3), st.Found)
}

func TestLearnAppendsAndReasonGap(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	hydrate(t, c, p, 0, 60, at(0))
	w, _ := wm(c, p, 60, hashes(1, 1)...)
	require.Equal(t, NoWatermark, w, "empty partition: K = -1")

	a, b := hashes(1, 5), hashes(2, 3)
	c.Learn(p, 60, 0, a, at(1))
	c.Learn(p, 60, 5, b, at(2))
	w, r := wm(c, p, 60, hashes(3, 2)...)
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(7), w)
	w, _ = wm(c, p, 60, b[1])
	require.Equal(t, int64(4), w)

	// A segment already known (e.g. loaded by a hydration) is ignored.
	c.Learn(p, 60, 5, b, at(2))
	w, r = wm(c, p, 60, hashes(3, 2)...)
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(7), w)

	// Someone else wrote offsets 8..9: the next segment starts at 10.
	c.Learn(p, 60, 10, hashes(4, 2), at(3))
	w, r = wm(c, p, 60, hashes(3, 2)...)
	require.Equal(t, NoWatermark, w)
	require.Equal(t, ReasonGap, r)
	st := c.Stats()
	require.Zero(t, st.Partitions)
	require.Equal(t, 1, st.Tombstones)
	require.Zero(t, st.Hashes)
	require.Less(t, st.Bytes, int64(1024), "a tombstone holds no hashes")

	// Gap backoff: 1 s of database time, as seen by Learn.
	_, ok := c.BeginHydrate(p)
	require.False(t, ok)
	c.Learn(p, 60, 12, hashes(5, 1), at(3.5))
	_, ok = c.BeginHydrate(p)
	require.False(t, ok)
	c.Learn(p, 60, 13, hashes(5, 1), at(4))
	_, ok = c.BeginHydrate(p)
	require.True(t, ok)
}

func TestLearnStraddlingKIsAGap(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	hydrate(t, c, p, 10, 60, at(0), Segment{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 10)})
	c.Learn(p, 60, 8, hashes(2, 4), at(1)) // offsets 8..11 cannot exist with K = 9
	_, r := wm(c, p, 60, hashes(3, 1)...)
	require.Equal(t, ReasonGap, r)
}

func TestReasonWindow(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	hydrate(t, c, p, 3, 60, at(0), Segment{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 3)})

	// Dedup off: nothing to shorten, the partition is untouched.
	_, r := wm(c, p, 0, hashes(1, 1)...)
	require.Equal(t, ReasonWindow, r)
	_, r = wm(c, p, 60, hashes(2, 1)...)
	require.Equal(t, ReasonNone, r)

	// The window grew: hashes between 60 s and 120 s old may never have
	// been loaded, or were trimmed.
	w, r := wm(c, p, 120, hashes(2, 1)...)
	require.Equal(t, NoWatermark, w)
	require.Equal(t, ReasonWindow, r)
	_, r = wm(c, p, 60, hashes(2, 1)...)
	require.Equal(t, ReasonWindow, r, "dropped, not only refused")
	_, ok := c.BeginHydrate(p)
	require.True(t, ok, "no backoff after a window change")

	// Same through Learn.
	q := pid(2)
	hydrate(t, c, q, 0, 60, at(0))
	c.Learn(q, 60, 0, hashes(3, 2), at(1))
	c.Learn(q, 30, 2, hashes(4, 2), at(2)) // shrank: kept, covers 30 s now
	w, r = wm(c, q, 30, hashes(5, 1)...)
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(3), w)
	_, r = wm(c, q, 60, hashes(5, 1)...)
	require.Equal(t, ReasonWindow, r, "the shrunk partition no longer covers 60 s")

	z := pid(3)
	hydrate(t, c, z, 0, 60, at(0))
	c.Learn(z, 0, 0, hashes(6, 2), at(1)) // deduplication switched off
	_, r = wm(c, z, 60, hashes(5, 1)...)
	require.Equal(t, ReasonWindow, r)
}

func TestReasonClock(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	hydrate(t, c, p, 0, 60, at(100))
	c.Learn(p, 60, 0, hashes(1, 2), at(100))
	c.Learn(p, 60, 2, hashes(2, 2), at(50)) // 50 s back: within the margin
	_, r := wm(c, p, 60, hashes(3, 1)...)
	require.Equal(t, ReasonNone, r)
	c.Learn(p, 60, 4, hashes(4, 2), at(30)) // 70 s back
	_, r = wm(c, p, 60, hashes(3, 1)...)
	require.Equal(t, ReasonClock, r)
}

func TestReasonPressure(t *testing.T) {
	t.Parallel()
	const budget = 32 << 10
	c := newCache(budget)
	p := pid(1)

	// Too big at load time: nothing is built.
	tok, ok := c.BeginHydrate(p)
	require.True(t, ok)
	c.FinishHydrate(tok, 2000, 60, at(0), []Segment{{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 2000)}})
	w, r := wm(c, p, 60, hashes(1, 1)...)
	require.Equal(t, NoWatermark, w)
	require.Equal(t, ReasonPressure, r)
	st := c.Stats()
	require.Equal(t, 1, st.TooBig)
	require.Zero(t, st.Bytes)

	// Backoff: 1 min of database time, as seen by Learn; no re-load loop.
	_, ok = c.BeginHydrate(p)
	require.False(t, ok)
	c.Learn(p, 60, 2000, hashes(2, 1), at(30))
	_, ok = c.BeginHydrate(p)
	require.False(t, ok)
	c.Learn(p, 60, 2001, hashes(2, 1), at(61))
	_, r = wm(c, p, 60, hashes(1, 1)...)
	require.Equal(t, ReasonUnknown, r, "backoff over: the caller may try again")

	// Fits at load time, outgrows the budget through Learn.
	tok, ok = c.BeginHydrate(p)
	require.True(t, ok)
	c.FinishHydrate(tok, 2002, 3600, at(61), nil)
	_, r = wm(c, p, 3600, hashes(1, 1)...)
	require.Equal(t, ReasonNone, r)
	evictedAt := -1.0
	for i := 0; i < 40 && evictedAt < 0; i++ {
		c.Learn(p, 3600, 2002+int64(i)*50, hashes(uint32(100+i), 50), at(62+float64(i)))
		if _, r = wm(c, p, 3600, hashes(1, 1)...); r != ReasonNone {
			evictedAt = 62 + float64(i)
		}
	}
	require.Equal(t, ReasonPressure, r)
	st = c.Stats()
	require.Zero(t, st.Partitions)
	require.LessOrEqual(t, st.Bytes, int64(budget))
	require.Positive(t, st.Evictions)
	_, ok = c.BeginHydrate(p)
	require.False(t, ok, "second strike: 2 min backoff")
	c.Learn(p, 3600, 5000, hashes(2, 1), at(evictedAt+119))
	_, ok = c.BeginHydrate(p)
	require.False(t, ok)
	c.Learn(p, 3600, 5001, hashes(2, 1), at(evictedAt+121))
	_, ok = c.BeginHydrate(p)
	require.True(t, ok)

	c.Forget(p)
	require.Zero(t, c.Stats().TooBig)
}

func TestTrimming(t *testing.T) {
	t.Parallel()
	c := newCache(64 << 20)
	p := pid(1)
	const window = 100
	hydrate(t, c, p, 0, window, at(0))
	segs := make([][][16]byte, 0, 400)
	for i := range 400 {
		h := hashes(uint32(i), 100)
		segs = append(segs, h)
		c.Learn(p, window, int64(i)*100, h, at(float64(i))) // one segment per second
	}
	// Newest is 399 s: entries created before 399-100-60 = 239 s are gone.
	st := c.Stats()
	require.Equal(t, int64(161*100), st.Hashes)
	w, r := wm(c, p, window, segs[238][0])
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(39999), w, "trimmed: SQL would not see it either")
	w, _ = wm(c, p, window, segs[239][0])
	require.Equal(t, int64(23899), w, "exactly window+margin old: kept")
	w, _ = wm(c, p, window, segs[300][50])
	require.Equal(t, int64(29999), w)

	// Time moves on with small segments: the old mass goes, and so does the
	// memory once the live part is small enough to compact and rebuild.
	before := st.Bytes
	for i := range 200 {
		c.Learn(p, window, 40000+int64(i), hashes(uint32(1000+i), 1), at(400+float64(i)))
	}
	st = c.Stats()
	require.Equal(t, int64(161), st.Hashes, "only the last 161 s are held")
	require.Less(t, st.Bytes, before/20)
	w, _ = wm(c, p, window, segs[399][0])
	require.Equal(t, int64(40199), w)
}

func TestTrimKeepsRepeatedHashes(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	h := hashes(7, 1)[0]
	// The same hash in two in-window segments (written while deduplication
	// was off, or by a writer that did not check).
	hydrate(t, c, p, 20, 60, at(100),
		Segment{FirstOffset: 0, CreatedAt: at(0), Hashes: [][16]byte{h}},
		Segment{FirstOffset: 10, CreatedAt: at(95), Hashes: append(hashes(8, 4), h)})
	w, _ := wm(c, p, 60, h)
	require.Equal(t, NoWatermark, w, "the lowest occurrence wins")
	// Trim the first occurrence (older than 60+60 s at newest = 200 s).
	c.Learn(p, 60, 20, hashes(9, 1), at(200))
	w, r := wm(c, p, 60, h)
	require.Equal(t, ReasonNone, r)
	require.Less(t, w, int64(10), "the occurrence at segment 10 must stay probed")
	// Trim the second: the hash is gone.
	c.Learn(p, 60, 21, hashes(9, 1), at(300))
	w, _ = wm(c, p, 60, h)
	require.Equal(t, int64(21), w)
}

func TestLRUOrder(t *testing.T) {
	t.Parallel()
	rows := func(tag uint32) []Segment {
		return []Segment{{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(tag, 200)}}
	}
	one := estimateFresh(200, 1)
	c := newCache(3*one + one/2) // room for three
	for i := 1; i <= 3; i++ {
		hydrate(t, c, pid(i), 200, 60, at(0), rows(uint32(i))...)
	}
	require.Equal(t, 3, c.Stats().Partitions)
	_, r := wm(c, pid(1), 60) // 1 is now the most recent, 2 the least
	require.Equal(t, ReasonNone, r)
	hydrate(t, c, pid(4), 200, 60, at(0), rows(4)...)
	for i, want := range []Reason{1: ReasonNone, 2: ReasonUnknown, 3: ReasonNone, 4: ReasonNone} {
		if i > 0 { // in order: 1 becomes the least recently used again
			_, r := wm(c, pid(i), 60)
			require.Equal(t, want, r, "partition %d", i)
		}
	}
	st := c.Stats()
	require.Equal(t, uint64(1), st.Evictions)
	require.Equal(t, 3, st.Partitions)
	require.LessOrEqual(t, st.Bytes, 3*one+one/2)
	// Learn counts as use too.
	c.Learn(pid(3), 60, 200, hashes(30, 1), at(1))
	hydrate(t, c, pid(5), 200, 60, at(0), rows(5)...)
	_, r = wm(c, pid(3), 60)
	require.Equal(t, ReasonNone, r)
	_, r = wm(c, pid(1), 60)
	require.Equal(t, ReasonUnknown, r, "1 was the least recently used")
}

func TestHydrationMergesRacingLearns(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	snap := hashes(1, 10)
	early, late1, late2 := hashes(2, 3), hashes(3, 2), hashes(4, 4)

	tok, ok := c.BeginHydrate(p)
	require.True(t, ok)
	// Committed before the loader's snapshot (so it is in the rows) but
	// learned after BeginHydrate.
	c.Learn(p, 60, 10, early, at(1))
	// Committed after the snapshot, learned out of order.
	c.Learn(p, 60, 15, late2, at(3))
	c.Learn(p, 60, 13, late1, at(2))
	_, r := wm(c, p, 60)
	require.Equal(t, ReasonHydrating, r)
	c.FinishHydrate(tok, 13, 60, at(1.5), []Segment{
		{FirstOffset: 10, CreatedAt: at(1), Hashes: early},
		{FirstOffset: 0, CreatedAt: at(0), Hashes: snap},
	})
	w, r := wm(c, p, 60, hashes(9, 1)...)
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(18), w)
	for _, tc := range []struct {
		h    [16]byte
		want int64
	}{{snap[9], -1}, {early[2], 9}, {late1[0], 12}, {late2[3], 14}} {
		w, _ := wm(c, p, 60, tc.h)
		require.Equal(t, tc.want, w)
	}
	// And it keeps learning from there.
	c.Learn(p, 60, 19, hashes(5, 1), at(4))
	w, _ = wm(c, p, 60)
	require.Equal(t, int64(19), w)
	require.Equal(t, int64(20), c.Stats().Hashes)
}

func TestHydrationHoleInstallsNothing(t *testing.T) {
	t.Parallel()
	for name, learns := range map[string][]int64{
		"hole before the first buffered": {12},
		"hole between buffered":          {10, 14},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newCache(1 << 20)
			p := pid(1)
			tok, ok := c.BeginHydrate(p)
			require.True(t, ok)
			for i, first := range learns {
				c.Learn(p, 60, first, hashes(uint32(i+2), 2), at(float64(i+1)))
			}
			c.FinishHydrate(tok, 10, 60, at(0.5), []Segment{{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 10)}})
			w, r := wm(c, p, 60, hashes(9, 1)...)
			require.Equal(t, NoWatermark, w)
			require.Equal(t, ReasonGap, r)
			require.Zero(t, c.Stats().Hashes)
		})
	}
}

func TestHydrationWindowGrewMeanwhile(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	tok, _ := c.BeginHydrate(p)
	c.Learn(p, 120, 5, hashes(2, 1), at(1))
	c.FinishHydrate(tok, 5, 60, at(0), []Segment{{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 5)}})
	_, r := wm(c, p, 60)
	require.Equal(t, ReasonWindow, r)
}

func TestHydrationInconsistentRows(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	for i, rows := range [][]Segment{
		{{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 5)}, {FirstOffset: 3, CreatedAt: at(0), Hashes: hashes(2, 5)}},
		{{FirstOffset: 8, CreatedAt: at(0), Hashes: hashes(1, 5)}}, // past next_offset 10
	} {
		p := pid(i)
		hydrate(t, c, p, 10, 60, at(0), rows...)
		_, r := wm(c, p, 60)
		require.Equal(t, ReasonGap, r)
	}
}

func TestHydrationSkipsRowsOutsideTheWindow(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	old, fresh := hashes(1, 5), hashes(2, 5)
	hydrate(t, c, p, 10, 60, at(1000),
		Segment{FirstOffset: 0, CreatedAt: at(1000 - 121), Hashes: old},
		Segment{FirstOffset: 5, CreatedAt: at(1000 - 119), Hashes: fresh})
	require.Equal(t, int64(5), c.Stats().Hashes)
	w, _ := wm(c, p, 60, old[0])
	require.Equal(t, int64(9), w)
}

func TestAbortForgetAndStaleTokens(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	rows := []Segment{{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 3)}}

	tok, ok := c.BeginHydrate(p)
	require.True(t, ok)
	c.AbortHydrate(tok)
	_, r := wm(c, p, 60)
	require.Equal(t, ReasonUnknown, r)
	c.FinishHydrate(tok, 3, 60, at(0), rows) // stale: ignored
	_, r = wm(c, p, 60)
	require.Equal(t, ReasonUnknown, r)

	tok, _ = c.BeginHydrate(p)
	c.Forget(p)
	tok2, ok := c.BeginHydrate(p)
	require.True(t, ok)
	c.FinishHydrate(tok, 3, 60, at(0), rows) // the forgotten attempt
	_, r = wm(c, p, 60)
	require.Equal(t, ReasonHydrating, r)
	c.FinishHydrate(tok2, 3, 60, at(0), rows)
	_, r = wm(c, p, 60)
	require.Equal(t, ReasonNone, r)

	c.Forget(p)
	_, r = wm(c, p, 60)
	require.Equal(t, ReasonUnknown, r)
	st := c.Stats()
	require.Zero(t, st.Bytes)
	require.Zero(t, st.Partitions+st.Hydrating+st.Tombstones)
	c.AbortHydrate(HydrateToken{})
	c.FinishHydrate(HydrateToken{}, 0, 60, at(0), nil)
}

func TestWatermarkDoesNotAllocate(t *testing.T) {
	// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
	c := newCache(64 << 20)
	p := pid(1)
	hydrate(t, c, p, 10000, 3600, at(0), Segment{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 10000)})
	batch := append(hashes(2, 99), hashes(1, 1)...)
	allocs := testing.AllocsPerRun(100, func() {
		if w, _ := c.Watermark(p, 3600, batch); w != -1 {
			panic(w)
		}
	})
	require.Zero(t, allocs)
	allocs = testing.AllocsPerRun(100, func() { c.Watermark(pid(2), 3600, batch) })
	require.Zero(t, allocs, "sentinel path")
}

// The estimate's tolerance, pinned by TestByteAccounting: the heap the cache
// really holds may exceed its estimate by at most maxUndercount (the budget
// is a promise: RSS = budget + a stated overhead), and may fall short of it
// by at most a factor minUsedShare (an over-estimate only wastes budget; a
// map that deleted keys is sized pessimistically).
const (
	maxUndercount = 1.05
	minUsedShare  = 0.5
)

// TestByteAccounting loads the cache to a known estimate in the shapes the
// broker sees and compares it with the heap growth measured by
// runtime.MemStats after a GC: one big freshly loaded partition, one sliding
// window (churn leaves tombstones in the map), and many small partitions
// (100k partitions, where the per-partition overhead dominates).
func TestByteAccounting(t *testing.T) {
	// Not parallel: it measures the heap.
	if testing.Short() {
		t.Skip("allocates a few hundred MB")
	}
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	check := func(name string, c *Cache, grown int64) {
		t.Helper()
		st := c.Stats()
		t.Logf("%s: %d partitions, %d hashes: heap %d B, estimate %d B (heap/estimate %.2f)",
			name, st.Partitions, st.Hashes, grown, st.Bytes, float64(grown)/float64(st.Bytes))
		require.LessOrEqual(t, float64(grown), maxUndercount*float64(st.Bytes), "%s: estimate too low", name)
		require.GreaterOrEqual(t, float64(grown), minUsedShare*float64(st.Bytes), "%s: estimate too high", name)
	}

	t.Run("fresh 1M hashes", func(t *testing.T) {
		const n = 1 << 20
		rows := make([]Segment, 0, n/1000+1)
		for i := 0; i < n; i += 1000 {
			rows = append(rows, Segment{FirstOffset: int64(i), CreatedAt: at(float64(i) / 1000), Hashes: hashes(uint32(i), min(1000, n-i))})
		}
		for _, hot := range []int{n, DefaultHotHashes} {
			base := heap()
			c := New(Config{Enabled: true, BudgetBytes: 4 << 30, HotHashes: hot})
			hydrate(t, c, pid(1), n, 3600, at(float64(n)/1000), rows...)
			check(fmt.Sprintf("fresh, %d held exactly", hot), c, heap()-base)
			runtime.KeepAlive(c)
		}
		runtime.KeepAlive(rows)
	})

	t.Run("sliding window", func(t *testing.T) {
		// One segment per second for two windows: the live count stays
		// near 3660 segments of 100 hashes.
		base := heap()
		c := newCache(4 << 30)
		q := pid(2)
		hydrate(t, c, q, 0, 3600, at(0))
		next := int64(0)
		for s := range 2 * 3660 {
			c.Learn(q, 3600, next, hashes(uint32(s), 100), at(float64(s)))
			next += 100
		}
		check("sliding", c, heap()-base)
		runtime.KeepAlive(c)
	})

	for _, sh := range []struct{ parts, segs, per int }{{100_000, 1, 1}, {100_000, 2, 10}, {10_000, 10, 10}} {
		t.Run(fmt.Sprintf("%d partitions of %dx%d", sh.parts, sh.segs, sh.per), func(t *testing.T) {
			base := heap()
			c := newCache(4 << 30)
			for p := range sh.parts {
				hydrate(t, c, pid(p), 0, 3600, at(0))
				next := int64(0)
				for s := range sh.segs {
					c.Learn(pid(p), 3600, next, hashes(uint32(p<<8|s), sh.per), at(float64(s)))
					next += int64(sh.per)
				}
			}
			check("small partitions", c, heap()-base)
			runtime.KeepAlive(c)
		})
	}
}

// TestConcurrentPartitions drives many partitions from their own goroutines
// (as actors do), with loaders racing and a budget that forces evictions,
// for the race detector.
func TestConcurrentPartitions(t *testing.T) {
	t.Parallel()
	c := newCache(256 << 10)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			p := pid(g)
			next := int64(0)
			var tok HydrateToken
			loading := false
			var done sync.WaitGroup
			for i := range 2000 {
				b := hashes(uint32(g<<16|i), 1+i%20)
				w, r := c.Watermark(p, 60, b)
				if r == ReasonNone && w > next-1 {
					panic("watermark above the log")
				}
				if !loading && r != ReasonNone && r != ReasonHydrating {
					if tok, loading = c.BeginHydrate(p); loading {
						n := next
						done.Add(1)
						go func(tok HydrateToken) { // the loader
							defer done.Done()
							c.FinishHydrate(tok, n, 60, at(float64(i)), nil)
						}(tok)
					}
				}
				c.Learn(p, 60, next, b, at(float64(i)))
				next += int64(len(b))
				if i%500 == 499 {
					done.Wait()
					loading = false
					if i%1000 == 999 {
						c.Forget(p)
					}
				}
				if i%100 == 0 {
					_ = c.Stats()
				}
			}
			done.Wait()
		})
	}
	wg.Wait()
	st := c.Stats()
	require.LessOrEqual(t, st.Bytes, int64(256<<10))
}

func TestForgetAll(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	rows := []Segment{{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(1, 3)}}
	hydrate(t, c, pid(1), 3, 60, at(0), rows...)
	hydrate(t, c, pid(2), 3, 60, at(0), rows...)
	tok, ok := c.BeginHydrate(pid(3)) // in flight across the reset
	require.True(t, ok)
	_, r := wm(c, pid(1), 60)
	require.Equal(t, ReasonNone, r)

	c.ForgetAll()
	for i := 1; i <= 3; i++ {
		_, r = wm(c, pid(i), 60)
		require.Equal(t, ReasonUnknown, r, "partition %d", i)
	}
	c.FinishHydrate(tok, 3, 60, at(0), rows) // begun before the reset: discarded
	_, r = wm(c, pid(3), 60)
	require.Equal(t, ReasonUnknown, r)
	st := c.Stats()
	require.Zero(t, st.Bytes)
	require.Zero(t, st.Partitions+st.Hydrating+st.Tombstones+st.TooBig)

	hydrate(t, c, pid(1), 3, 60, at(0), rows...) // loads again afterwards
	_, r = wm(c, pid(1), 60)
	require.Equal(t, ReasonNone, r)
}

// Two different hashes with the same 8-byte key are held as one key: a batch
// holding either lowers the watermark below every segment holding either, a
// promise that stays true for the batch hash (it only probes more).
func TestHashesSharingAKey(t *testing.T) {
	t.Parallel()
	c := newCache(1 << 20)
	p := pid(1)
	a := hashes(11, 1)[0]
	var b [16]byte
	for i := range 8 { // the same value XORed into both halves keeps the key
		b[i], b[8+i] = a[i]^0x5a, a[8+i]^0x5a
	}
	require.NotEqual(t, a, b)
	require.Equal(t, hashKey(&a), hashKey(&b))
	hydrate(t, c, p, 30, 3600, at(10),
		Segment{FirstOffset: 0, CreatedAt: at(0), Hashes: hashes(12, 10)},
		Segment{FirstOffset: 10, CreatedAt: at(5), Hashes: [][16]byte{a}},
		Segment{FirstOffset: 11, CreatedAt: at(6), Hashes: hashes(13, 19)})
	w, found, r := c.WatermarkFound(p, 3600, [][16]byte{b})
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(9), w, "below the segment holding the other hash of the key")
	require.Equal(t, 1, found, "a prediction only: the probe decides")
	c.Learn(p, 3600, 30, [][16]byte{b}, at(20))
	w, _ = wm(c, p, 3600, a)
	require.Equal(t, int64(9), w, "the lowest segment holding the key")
}

// WatermarkOriginals names, for every hash of a batch the cache holds
// entirely, the first offset of the lowest segment holding it (a hash
// learned again later keeps its first segment), under the span cap too, and
// nothing when a hash is missing or the cache cannot vouch for the
// partition.
func TestWatermarkOriginals(t *testing.T) {
	t.Parallel()
	c := New(Config{Enabled: true, BudgetBytes: 1 << 20, MaxSpan: 4})
	p := pid(1)
	hydrate(t, c, p, 0, 60, at(0))
	a, b := hashes(1, 5), hashes(2, 3)
	c.Learn(p, 60, 0, a, at(1))
	c.Learn(p, 60, 5, b, at(2))
	c.Learn(p, 60, 8, [][16]byte{a[2]}, at(3)) // a[2] again, at offset 8

	dst := make([]int64, 0, 8)
	w, found, origs, r := c.WatermarkOriginals(p, 60, [][16]byte{b[2], a[2], b[0]}, dst)
	require.Equal(t, ReasonSpan, r, "a[2]'s first segment lies 9 offsets below K")
	require.Equal(t, NoWatermark, w)
	require.Equal(t, 3, found)
	require.Equal(t, []int64{5, 0, 5}, origs, "the lowest segment of each")
	require.Equal(t, cap(dst), cap(origs), "dst's storage is reused")

	w, found, origs, r = c.WatermarkOriginals(p, 60, [][16]byte{b[1]}, nil)
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(4), w)
	require.Equal(t, 1, found)
	require.Equal(t, []int64{5}, origs)

	_, found, origs, _ = c.WatermarkOriginals(p, 60, [][16]byte{b[1], hashes(3, 1)[0]}, dst)
	require.Equal(t, 1, found)
	require.Nil(t, origs, "a hash the cache does not hold: no originals")

	// A window larger than the one loaded: the cache cannot vouch.
	_, found, origs, r = c.WatermarkOriginals(p, 600, [][16]byte{b[1]}, dst)
	require.Equal(t, ReasonWindow, r)
	require.Zero(t, found)
	require.Nil(t, origs)
	_, _, origs, r = c.WatermarkOriginals(pid(2), 60, [][16]byte{b[1]}, dst)
	require.Equal(t, ReasonUnknown, r)
	require.Nil(t, origs)
}

// deepRows returns n hashes in rows of per, at offsets 0..n-1, created one
// second per row ending at now, tagged tag.
func deepRows(tag uint32, n, per int, now float64) []Segment {
	rows := make([]Segment, 0, n/per+1)
	for i := 0; i < n; i += per {
		rows = append(rows, Segment{FirstOffset: int64(i), CreatedAt: at(now - float64(n-i)/float64(per)),
			Hashes: hashes(tag+uint32(i), min(per, n-i))})
	}
	return rows
}

// TestDeepWindowHeldInFilters loads a window deeper than HotHashes: the
// newest hashes are held exactly, the rest in filter blocks, at a small
// fraction of the memory; fresh batches still get W = K, a repeat of a
// recent id its exact watermark, a repeat of an old one ReasonCold.
func TestDeepWindowHeldInFilters(t *testing.T) {
	t.Parallel()
	const n, per, hot = 400_000, 10, 10_000
	c := New(Config{Enabled: true, BudgetBytes: 64 << 20, HotHashes: hot})
	p := pid(1)
	rows := deepRows(1, n, per, 100_000)
	hydrate(t, c, p, n, 3*86400, at(100_000), rows...)
	st := c.Stats()
	require.Equal(t, 1, st.Partitions)
	require.EqualValues(t, n, st.Hashes)
	exact := st.Hashes - st.FilterHashes
	require.LessOrEqual(t, exact, int64(hot), "held exactly")
	require.Greater(t, exact, int64(hot/2))
	require.Less(t, st.Bytes, int64(n*5+hot*64), "a deep window costs about 4 B a hash in filters")
	for _, b := range c.mustEntry(p).cold {
		require.InDelta(t, b.cap, b.n, per, "a load's blocks are sized for the offsets they hold")
		require.Equal(t, bloomBytesFor(b.cap), b.f.bytes())
	}
	require.InDelta(t, float64(st.FilterHashes)*bloomBits/8, float64(st.FilterBytes), float64(len(c.mustEntry(p).cold)*64))
	require.LessOrEqual(t, len(c.mustEntry(p).cold), 5, "a load makes about four blocks")

	// A recent repeat: exact.
	recent := rows[len(rows)-3]
	w, r := wm(c, p, 3*86400, recent.Hashes[4])
	require.Equal(t, ReasonNone, r)
	require.Equal(t, recent.FirstOffset-1, w)
	// An old repeat: below its filter block, far beyond MaxSpan.
	w, r = wm(c, p, 3*86400, rows[7].Hashes[2])
	require.Equal(t, ReasonCold, r)
	require.Equal(t, NoWatermark, w)
	// Fresh batches: W = K, but for the filters' rare false positives.
	cold := 0
	for i := range 2000 {
		b := hashes(0xF0000000+uint32(i)*16, 10)
		if w, r := wm(c, p, 3*86400, b...); r == ReasonCold {
			cold++
		} else {
			require.Equal(t, ReasonNone, r)
			require.Equal(t, int64(n-1), w)
		}
	}
	t.Logf("fresh batches of 10 taking a full probe for a false positive: %d of 2000", cold)
	require.Less(t, cold, 4, "false positives above 0.2% of batches of 10")
	st = c.Stats()
	require.EqualValues(t, 1+cold, c.sentinels[ReasonCold].Load())
	require.Positive(t, st.ColdHits)
}

// TestLearnFreezesAndTrimsFilters: pushes beyond HotHashes freeze the oldest
// segments into filter blocks, and a block goes whole once its newest
// segment has left the window.
func TestLearnFreezesAndTrimsFilters(t *testing.T) {
	t.Parallel()
	const hot, window = 200, 100
	c := New(Config{Enabled: true, BudgetBytes: 1 << 20, HotHashes: hot, MaxSpan: math.MaxInt64 / 2})
	p := pid(2)
	hydrate(t, c, p, 0, window, at(0))
	var first [][16]byte
	next := int64(0)
	for s := range 100 { // 10 hashes a second for 100 s: 1000 hashes
		b := hashes(uint32(s)<<8, 10)
		if s == 0 {
			first = b
		}
		c.Learn(p, window, next, b, at(float64(s)))
		next += 10
		e := c.mustEntry(p)
		e.mu.Lock()
		require.LessOrEqual(t, len(e.hs)-e.hHead, hot)
		e.mu.Unlock()
	}
	st := c.Stats()
	require.EqualValues(t, 1000, st.Hashes)
	require.GreaterOrEqual(t, st.FilterHashes, int64(1000-hot))
	// The first segment's hash is in the oldest block: W drops below it.
	w, r := wm(c, p, window, first[3])
	require.Equal(t, ReasonNone, r)
	require.Equal(t, int64(-1), w)
	// 100 s on, everything pushed in the first 40 s (+ the 60 s margin)
	// has left the window: the blocks holding only those are gone.
	for s := 100; s < 200; s++ {
		c.Learn(p, window, next, hashes(uint32(s)<<8, 10), at(float64(s)))
		next += 10
	}
	e := c.mustEntry(p)
	e.mu.Lock()
	for _, b := range e.cold {
		require.GreaterOrEqual(t, b.newest, at(199-window-60).UnixNano(), "a block whose every segment left the window is kept")
	}
	require.NotEmpty(t, e.cold)
	require.Positive(t, e.cold[0].lo, "the oldest block was not dropped")
	e.mu.Unlock()
	w, _ = wm(c, p, window, first[3])
	require.Equal(t, next-1, w, "an id whose segment left the window no longer lowers W")
}

// mustEntry returns p's entry.
func (c *Cache) mustEntry(p [16]byte) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Peek(p)
	if !ok {
		panic("no entry")
	}
	return e
}
