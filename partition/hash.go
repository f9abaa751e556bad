package partition

import (
	"encoding/binary"
	"encoding/hex"

	"github.com/zeebo/xxh3"
)

// HashSize is the size in bytes of a transaction-id hash.
const HashSize = 16

// Hash is the xxh3-128 hash of a transaction id, big-endian (high half first).
// It is the key of the deduplication probe; SQL never computes it.
type Hash [HashSize]byte

// HashTxID returns the hash of a transaction id.
func HashTxID(txID string) Hash {
	h := xxh3.HashString128(txID)
	var out Hash
	binary.BigEndian.PutUint64(out[:8], h.Hi)
	binary.BigEndian.PutUint64(out[8:], h.Lo)
	return out
}

// String returns the hash as 32 lowercase hex digits.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }
