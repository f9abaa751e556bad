package partition

import (
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zeebo/xxh3"
)

func TestHashTxIDIsBigEndianXXH3(t *testing.T) {
	t.Parallel()
	ids := []string{"", "a", "b", "tx-1", "tx-2", "é", "\x00", strings.Repeat("z", MaxTxIDLen), NewV7().String()}
	for i := range 200 {
		ids = append(ids, "order-"+strconv.Itoa(i))
	}
	for _, id := range ids {
		h := HashTxID(id)
		require.Len(t, h, HashSize)
		require.Equal(t, 16, HashSize)

		want := xxh3.HashString128(id)
		require.Equal(t, want.Hi, binary.BigEndian.Uint64(h[:8]), "high half first for %q", id)
		require.Equal(t, want.Lo, binary.BigEndian.Uint64(h[8:]), "low half second for %q", id)
		b := want.Bytes() // xxh3's own big-endian (Hi, Lo) encoding
		require.Equal(t, b[:], h[:])
		require.Equal(t, want, xxh3.Hash128([]byte(id)), "string and byte hashing agree")

		require.Equal(t, h, HashTxID(id), "deterministic for %q", id)
		require.Equal(t, h, HashTxID(strings.Clone(id)), "depends on content only for %q", id)

		s := h.String()
		require.Len(t, s, 32)
		require.Equal(t, hex.EncodeToString(h[:]), s)
		require.Equal(t, strings.ToLower(s), s)
	}
}

func TestHashTxIDDistinct(t *testing.T) {
	t.Parallel()
	seen := make(map[Hash]string)
	add := func(id string) {
		h := HashTxID(id)
		prev, dup := seen[h]
		require.False(t, dup, "%q and %q hash alike", prev, id)
		seen[h] = id
	}
	add("")
	for i := range 50_000 {
		add(strconv.Itoa(i))
	}
	// Near misses: case, padding and one-byte changes.
	for _, id := range []string{"Tx", "tx ", " tx", "tx\x00", "tX", "tx-", "tx"} {
		add(id)
	}
	require.Len(t, seen, 1+50_000+7)
}
