package main

import (
	"math"
	"math/bits"
	"time"
)

// Histogram is an HDR-style log-linear latency histogram over nanoseconds.
//
// Values below 2^subBits are counted exactly. Above that, every power-of-two
// range [2^k, 2^(k+1)) is split into 2^(subBits-1) equal buckets, so a
// bucket is at most 1/2^(subBits-1) = 1/128 (0.78%) of the values it holds
// wide; reporting the bucket midpoint keeps the relative error under 0.4%.
// Values are clamped to histMax (60 s); min, max and sum are kept exactly.
//
// A Histogram is not safe for concurrent use.
type Histogram struct {
	counts []uint64
	total  uint64
	sum    float64 // nanoseconds, exact up to float64 rounding
	min    int64
	max    int64
}

const (
	subBits  = 8
	subCount = 1 << subBits // 256 exact buckets below 256 ns
	subHalf  = subCount / 2 // buckets per power of two above that
	histMax  = int64(60 * time.Second)
)

// NewHistogram returns an empty histogram covering 0..60 s.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, bucketIndex(histMax)+1), min: math.MaxInt64}
}

// bucketIndex maps a non-negative value to its bucket.
func bucketIndex(v int64) int {
	u := uint64(v)
	if u < subCount {
		return int(u)
	}
	shift := bits.Len64(u) - subBits // >= 1
	mant := u >> uint(shift)         // in [subHalf, subCount)
	return subCount + (shift-1)*subHalf + int(mant-subHalf)
}

// bucketBounds returns the [lo, hi) range of values of bucket i.
func bucketBounds(i int) (lo, hi int64) {
	if i < subCount {
		return int64(i), int64(i) + 1
	}
	j := i - subCount
	shift := j/subHalf + 1
	mant := uint64(j%subHalf + subHalf)
	return int64(mant << uint(shift)), int64((mant + 1) << uint(shift))
}

// Record adds one value.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.sum += float64(v)
	h.total++
	if v > histMax {
		v = histMax
	}
	h.counts[bucketIndex(v)]++
}

// Merge adds all of o's values into h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Reset empties the histogram, keeping its storage.
func (h *Histogram) Reset() {
	clear(h.counts)
	h.total, h.sum, h.min, h.max = 0, 0, math.MaxInt64, 0
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total }

// Max is the largest recorded value (0 when empty).
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Min is the smallest recorded value (0 when empty).
func (h *Histogram) Min() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Mean is the exact arithmetic mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Quantile returns the value at quantile q in [0, 1]: the midpoint of the
// bucket holding the ceil(q*count)-th smallest value, clamped to the exact
// min and max. It returns 0 when the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	if q <= 0 {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := max(uint64(math.Ceil(q*float64(h.total))), 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketBounds(i)
			v := lo + (hi-1-lo)/2
			v = max(v, h.min)
			v = min(v, h.max)
			return time.Duration(v)
		}
	}
	return time.Duration(h.max)
}
