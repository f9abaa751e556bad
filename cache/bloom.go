package cache

// A bloom is a blocked Bloom filter over hash keys (hashKey): a key sets, and
// is tested by, bloomProbes bits of one 512-bit block (a cache line), so a
// test costs one memory access. It has no false negatives: a key added is
// always reported present. A key never added is reported present with a
// probability that depends on how full the filter is: sized at bloomBits
// bits per key, about 6 in 1,000,000 when full (TestBloomFalsePositives;
// 24 bits gave 6 in 100,000, 28 bits 2 in 100,000).
// It cannot delete: the cache drops a whole filter once every key in it has
// left the window.
type bloom struct {
	words []uint64 // len = 8 * blocks
	nblk  uint64
}

const (
	// bloomBits is the filter's size per key it is made for.
	bloomBits = 32
	// bloomProbes is the bits a key sets in its block.
	bloomProbes = 10
	// bloomBlockWords is one 512-bit block.
	bloomBlockWords = 8
)

// newBloom returns a filter sized for n keys.
func newBloom(n int) bloom {
	nblk := max(1, (n*bloomBits+511)/512)
	return bloom{words: make([]uint64, nblk*bloomBlockWords), nblk: uint64(nblk)}
}

// bloomBytesFor is the memory of a filter sized for n keys.
func bloomBytesFor(n int) int64 {
	return int64(max(1, (n*bloomBits+511)/512)) * bloomBlockWords * 8
}

// bytes is the memory the filter's bit array holds.
func (b *bloom) bytes() int64 { return int64(cap(b.words)) * 8 }

// mix64 is SplitMix64's finaliser: every output bit depends on every input
// bit, so the bits a key sets are independent of the block it picks.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// mixes returns the two mixes of key that choose its block and bit
// positions: computed once per key, whatever the number of filters it is
// tested against.
func mixes(key uint64) (h1, h2 uint64) {
	return mix64(key), mix64(key ^ 0x9e3779b97f4a7c15)
}

// block returns key's block (its 8 words) from its mixes: from h2's top 32
// bits (multiply-shift reduction); the bit positions use h1 and h2's low 27
// bits, disjoint bits of the mixes.
func (b *bloom) block(h2 uint64) []uint64 {
	base := ((h2 >> 32) * b.nblk >> 32) * bloomBlockWords
	return b.words[base : base+bloomBlockWords : base+bloomBlockWords]
}

// bitPos is the i-th of a key's bloomProbes bit positions in its block:
// nine bits each, seven from h1 and three from h2's low 27 bits.
func bitPos(i int, h1, h2 uint64) uint64 {
	if i < 7 {
		return (h1 >> (9 * i)) & 511
	}
	return (h2 >> (9 * (i - 7))) & 511
}

// add sets key's bits.
func (b *bloom) add(key uint64) {
	h1, h2 := mixes(key)
	w := b.block(h2)
	for i := range bloomProbes {
		pos := bitPos(i, h1, h2)
		w[pos>>6] |= 1 << (pos & 63)
	}
}

// has reports whether key may have been added (false: it certainly was
// not).
func (b *bloom) has(key uint64) bool {
	h1, h2 := mixes(key)
	return b.hasMixes(h1, h2)
}

// hasMixes is has for a key's mixes.
func (b *bloom) hasMixes(h1, h2 uint64) bool {
	w := b.block(h2)
	for i := range bloomProbes {
		if pos := bitPos(i, h1, h2); w[pos>>6]&(1<<(pos&63)) == 0 {
			return false
		}
	}
	return true
}

// addAll adds keys. It first reads one word of each key's block, so that
// the keys' cache misses overlap (the reads are independent; adding key by
// key, each miss waited for the previous key's writes), then sets the bits:
// a cache load adds a row's keys at once.
func (b *bloom) addAll(keys []uint64) {
	var sink uint64
	for _, k := range keys {
		_, h2 := mixes(k)
		sink |= b.block(h2)[0]
	}
	keep(sink)
	for _, k := range keys {
		b.add(k)
	}
}

// keep keeps addAll's reads from being optimised away.
//
//go:noinline
func keep(uint64) {}
