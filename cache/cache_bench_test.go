package cache

import (
	"fmt"
	"testing"
)

// BenchmarkWatermark measures the hot path on a warm partition: one LRU bump,
// one map lookup per batch hash and one test per filter block (the 1M-hash
// partition holds most of its window in four of them). Batches are new
// hashes (the common case: most pushes are not duplicates), drawn from a
// pool larger than the CPU caches so lookups miss them as they would in
// production. A filter's false positive answers a lower watermark (or
// ReasonCold), as in production: cold/op reports how often.
func BenchmarkWatermark(b *testing.B) {
	for _, held := range []int{100_000, 1_000_000} {
		c := newCache(1 << 30)
		p := pid(1)
		rows := make([]Segment, 0, held/1000)
		for i := 0; i < held; i += 1000 {
			rows = append(rows, Segment{FirstOffset: int64(i), CreatedAt: at(float64(i) / 1000), Hashes: hashes(uint32(i), 1000)})
		}
		tok, ok := c.BeginHydrate(p)
		if !ok {
			b.Fatal("BeginHydrate")
		}
		c.FinishHydrate(tok, int64(held), 3600, at(float64(held)/1000), rows)
		if st := c.Stats(); st.Hashes != int64(held) {
			b.Fatalf("held %d hashes, want %d", st.Hashes, held)
		}
		for _, n := range []int{1, 10, 100} {
			const pool = 4096
			batches := make([][][16]byte, pool)
			for i := range batches {
				batches[i] = hashes(0xF0000000|uint32(i), n)
			}
			b.Run(fmt.Sprintf("held=%d/batch=%d", held, n), func(b *testing.B) {
				b.ReportAllocs()
				i, cold := 0, 0
				for b.Loop() {
					switch w, r := c.Watermark(p, 3600, batches[i%pool]); {
					case r == ReasonNone && w == int64(held)-1:
					case r == ReasonCold || r == ReasonNone:
						cold++ // a false positive of a filter
					default:
						b.Fatalf("w=%d r=%v", w, r)
					}
					i++
				}
				b.ReportMetric(float64(cold)/float64(i), "cold/op")
			})
		}
	}
}
