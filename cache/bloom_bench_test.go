package cache

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkBloomAddRows adds rows of 10 keys, as a cache load does, to 16
// filters of 390k keys each (a 100M window over 16 partitions has that per
// cold block), the rows of the 16 interleaved as in the sidecar's heap:
// one key per op.
func BenchmarkBloomAddRows(b *testing.B) {
	const filters, keys, row = 16, 390_000, 10
	fs := make([]bloom, filters)
	for i := range fs {
		fs[i] = newBloom(keys)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([][row]uint64, 4096)
	for i := range rows {
		for k := range rows[i] {
			rows[i][k] = rng.Uint64()
		}
	}
	for _, name := range []string{"addAll", "add", "addAll", "add"} {
		b.Run(name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				r := &rows[i%len(rows)]
				f := &fs[i%filters]
				if name == "add" { //nolint:goconst // the sub-benchmark's name
					for _, k := range r {
						f.add(k)
					}
				} else {
					f.addAll(r[:])
				}
				i++
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*row), "ns/key")
		})
	}
}
