package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exactQuantile is the ceil(q*n)-th smallest value, the definition the
// histogram approximates.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	rank = max(rank, 1)
	return sorted[rank-1]
}

func requireWithin(t *testing.T, want, got time.Duration, rel float64, msg string) {
	t.Helper()
	diff := math.Abs(float64(got - want))
	require.LessOrEqualf(t, diff, rel*float64(want), "%s: want %v got %v (%.3f%%)", msg, want, got, 100*diff/float64(want))
}

func checkQuantiles(t *testing.T, values []time.Duration) {
	t.Helper()
	h := NewHistogram()
	var sum float64
	for _, v := range values {
		h.Record(v)
		sum += float64(v)
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	require.Equal(t, uint64(len(values)), h.Count())
	for _, q := range []float64{0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999} {
		requireWithin(t, exactQuantile(sorted, q), h.Quantile(q), 0.01, "q="+formatQ(q))
	}
	require.Equal(t, sorted[0], h.Min())
	require.Equal(t, sorted[len(sorted)-1], h.Max())
	require.Equal(t, sorted[len(sorted)-1], h.Quantile(1))
	requireWithin(t, time.Duration(sum/float64(len(values))), h.Mean(), 1e-9, "mean")
}

func formatQ(q float64) string { return time.Duration(q * 1e6).String() }

func TestHistogramUniform(t *testing.T) {
	t.Parallel()
	// 1 µs .. 100 ms in even steps.
	var values []time.Duration
	for v := time.Microsecond; v <= 100*time.Millisecond; v += 997 * time.Nanosecond {
		values = append(values, v)
	}
	checkQuantiles(t, values)
}

func TestHistogramExponential(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(1, 2))
	values := make([]time.Duration, 200_000)
	for i := range values {
		values[i] = time.Microsecond + time.Duration(rnd.ExpFloat64()*float64(5*time.Millisecond))
	}
	checkQuantiles(t, values)
}

func TestHistogramLogNormalWideRange(t *testing.T) {
	t.Parallel()
	// Spans µs to seconds: a long-tailed latency distribution.
	rnd := rand.New(rand.NewPCG(3, 4))
	values := make([]time.Duration, 200_000)
	for i := range values {
		v := math.Exp(rnd.NormFloat64()*2.0 + math.Log(float64(2*time.Millisecond)))
		values[i] = time.Duration(min(max(v, float64(time.Microsecond)), float64(50*time.Second)))
	}
	checkQuantiles(t, values)
}

func TestHistogramBucketsCoverWithBoundedWidth(t *testing.T) {
	t.Parallel()
	rnd := rand.New(rand.NewPCG(5, 6))
	check := func(v int64) {
		i := bucketIndex(v)
		lo, hi := bucketBounds(i)
		require.LessOrEqual(t, lo, v)
		require.Less(t, v, hi)
		if v >= subCount {
			require.LessOrEqual(t, float64(hi-lo)/float64(lo), 1.0/128, "v=%d", v)
		}
	}
	for v := range int64(5000) {
		check(v)
	}
	for range 100_000 {
		check(rnd.Int64N(histMax + 1))
	}
	check(histMax)
	// Buckets are contiguous and increasing.
	for i := 1; i <= bucketIndex(histMax); i++ {
		_, prevHi := bucketBounds(i - 1)
		lo, _ := bucketBounds(i)
		require.Equal(t, prevHi, lo, "bucket %d", i)
	}
}

func TestHistogramSingleValueAndClamp(t *testing.T) {
	t.Parallel()
	h := NewHistogram()
	require.Zero(t, h.Quantile(0.5))
	require.Zero(t, h.Mean())
	require.Zero(t, h.Min())
	h.Record(1234567 * time.Nanosecond)
	// One value: every quantile is that value exactly (clamped to min/max).
	require.Equal(t, 1234567*time.Nanosecond, h.Quantile(0.5))
	require.Equal(t, 1234567*time.Nanosecond, h.Quantile(0.999))

	h.Record(2 * time.Minute) // beyond the 60 s range: counted, max exact
	require.Equal(t, 2*time.Minute, h.Max())
	require.Equal(t, 2*time.Minute, h.Quantile(1))
	require.Equal(t, uint64(2), h.Count())
	h.Record(-time.Second) // clock went backwards: counted as 0
	require.Equal(t, time.Duration(0), h.Min())
}

func TestHistogramMergeAndReset(t *testing.T) {
	t.Parallel()
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Millisecond
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
		all.Record(d)
	}
	a.Merge(b)
	a.Merge(NewHistogram())
	require.Equal(t, all.Count(), a.Count())
	require.Equal(t, all.Min(), a.Min())
	require.Equal(t, all.Max(), a.Max())
	require.Equal(t, all.Mean(), a.Mean())
	for _, q := range []float64{0.5, 0.9, 0.99} {
		require.Equal(t, all.Quantile(q), a.Quantile(q))
	}
	a.Reset()
	require.Zero(t, a.Count())
	require.Zero(t, a.Quantile(0.99))
	a.Record(time.Millisecond)
	require.Equal(t, time.Millisecond, a.Min())
}
