package wire

import (
	"math"
	rtmetrics "runtime/metrics"
)

// schedLatencyName is the Go runtime's histogram of scheduling latency: how
// long each goroutine that became ready to run waited for a thread, since
// the process started. Regina has no event loop; this is the nearest thing
// to Node's event-loop lag that Queen's dashboard charts (a goroutine
// serving a request that waits to be scheduled is what a request waiting
// on a busy event loop is there).
const schedLatencyName = "/sched/latencies:seconds"

// schedLatency turns the runtime's cumulative histogram into figures per
// interval between two reads. Not safe for concurrent use (the sampler's
// goroutine owns it).
type schedLatency struct {
	sample      []rtmetrics.Sample
	prev, delta []uint64
}

// read returns the mean and the 99th percentile, in milliseconds, of the
// scheduling latencies observed since the previous read; ok is false at the
// first read, when no goroutine was scheduled since, and when the runtime
// does not offer the histogram.
func (l *schedLatency) read() (meanMs, p99Ms float64, ok bool) {
	if l.sample == nil {
		l.sample = []rtmetrics.Sample{{Name: schedLatencyName}}
	}
	rtmetrics.Read(l.sample)
	if l.sample[0].Value.Kind() != rtmetrics.KindFloat64Histogram {
		return 0, 0, false
	}
	h := l.sample[0].Value.Float64Histogram()
	first := l.prev == nil
	if len(l.prev) != len(h.Counts) {
		l.prev, l.delta = make([]uint64, len(h.Counts)), make([]uint64, len(h.Counts))
		first = true
	}
	var total uint64
	for i, c := range h.Counts {
		l.delta[i] = c - l.prev[i]
		total += l.delta[i]
	}
	copy(l.prev, h.Counts)
	if first || total == 0 {
		return 0, 0, false
	}
	return histMean(h.Buckets, l.delta, total) * 1000, histQuantile(h.Buckets, l.delta, total, 0.99) * 1000, true
}

// bucketEdges returns bucket i's finite edges: an infinite lower edge is 0
// (latencies are not negative), an infinite upper edge the lower one.
func bucketEdges(bounds []float64, i int) (lo, hi float64) {
	lo, hi = bounds[i], bounds[i+1]
	if math.IsInf(lo, -1) || lo < 0 {
		lo = 0
	}
	if math.IsInf(hi, 1) {
		hi = lo
	}
	return lo, hi
}

// histMean is the mean of a histogram taking each bucket at its middle.
func histMean(bounds []float64, counts []uint64, total uint64) float64 {
	var sum float64
	for i, c := range counts {
		if c > 0 {
			lo, hi := bucketEdges(bounds, i)
			sum += float64(c) * (lo + hi) / 2
		}
	}
	return sum / float64(total)
}

// histQuantile is the q-quantile of a histogram, interpolated linearly
// inside the bucket that holds it.
func histQuantile(bounds []float64, counts []uint64, total uint64, q float64) float64 {
	target := q * float64(total)
	var cum float64
	for i, c := range counts {
		if c == 0 {
			continue
		}
		lo, hi := bucketEdges(bounds, i)
		if cum+float64(c) >= target {
			return lo + (hi-lo)*max(target-cum, 0)/float64(c)
		}
		cum += float64(c)
	}
	return 0
}
