package cache

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBloomHasEveryKeyAdded(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 100, 10000} {
		b := newBloom(n)
		keys := make([]uint64, n)
		for i := range keys {
			keys[i] = rng.Uint64()
			if i%2 == 0 {
				b.add(keys[i])
			}
		}
		// The other half in rows, as a load adds them.
		var row []uint64
		for i := 1; i < n; i += 2 {
			if row = append(row, keys[i]); len(row) == 10 || i+2 >= n {
				b.addAll(row)
				row = row[:0]
			}
		}
		for _, k := range keys {
			require.True(t, b.has(k), "n=%d", n)
		}
		require.Equal(t, bloomBytesFor(n), b.bytes())
	}
}

// TestBloomFalsePositives measures the false positive rate of a full filter
// (sized for n keys, holding n) and of a half-full one, and pins them below
// what the cache's design assumes (docs/cache.md: about 6e-6 full).
func TestBloomFalsePositives(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	const n, tries = 200_000, 2_000_000
	for _, fill := range []struct {
		keys int
		max  float64
	}{{n, 1.5e-5}, {n / 2, 2e-6}} {
		b := newBloom(n)
		for range fill.keys {
			b.add(rng.Uint64())
		}
		fp := 0
		for range tries {
			if b.has(rng.Uint64()) {
				fp++
			}
		}
		rate := float64(fp) / tries
		t.Logf("filter for %d keys holding %d: %d false positives in %d (%.2g)", n, fill.keys, fp, tries, rate)
		require.Less(t, rate, fill.max)
	}
}
